"""Request frames to kio objects, kio response objects to frames.

``decode_request(frame)`` takes one frame as ``FrameReader`` yields it (no size
prefix) and returns ``(RequestHeader, request)``, where ``request`` is the kio
dataclass for that api key and version. Produce is read by hand into kio's
classes, its records left as slices of the frame (``produce_request``);
v0-v2 come back as kio's v3 class with ``transactional_id=None``
(``header.api_version`` stays authoritative).
Bytes after the body are ignored, as Kafka's own parser ignores them.

Failure modes, each its own exception (see ``exceptions``):
``UnsupportedApiKey`` and ``UnsupportedVersion`` (checked against
``versions.SUPPORTED_VERSIONS`` before the body is touched, and carrying the
header for the ApiVersions error-35 answer or a log line), and
``MalformedRequest`` for anything truncated or garbled.

``encode_response(header, response)`` returns the complete frame: size prefix,
response header of the right version, body. The response object fixes the wire
version, which must match the request's, except for Produce v0-v2 (a kio v3
object written in the old layout) and the ApiVersions fallback (a v0 object
answering any version).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from functools import cache

from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Payload

from . import legacy_produce, produce_request
from .bounds import apply_edits, check_body
from .exceptions import MalformedRequest, UnsupportedApiKey, UnsupportedVersion
from .header import RequestHeader, encode_response_header, parse_request_header, peek_prefix
from .schemas import (
    API_VERSIONS,
    CONTROLLED_SHUTDOWN,
    LEGACY_PRODUCE_MAX,
    PRODUCE,
    request_header_version,
    request_type,
    response_header_version,
)
from .versions import SUPPORTED_VERSIONS

_int32 = struct.Struct(">i")

_reader = cache(entity_reader)


def decode_request(frame: bytes | memoryview,
                   supported: Mapping[int, tuple[int, int]] = SUPPORTED_VERSIONS,
                   ) -> tuple[RequestHeader, object]:
    api_key, api_version, _ = peek_prefix(frame)
    versions = supported.get(api_key)
    if versions is None:
        raise UnsupportedApiKey(_best_effort_header(frame))
    if not versions[0] <= api_version <= versions[1] or request_type(api_key, api_version) is None:
        raise UnsupportedVersion(_best_effort_header(frame), *versions)
    header, offset = parse_request_header(frame, request_header_version(api_key, api_version))
    try:
        return header, decode_body(api_key, api_version, frame, offset)
    except MalformedRequest as exc:  # name what it was, for the one log line the server writes
        raise MalformedRequest(f"api key {api_key} v{api_version} from client {header.client_id!r}: {exc}") from None


def decode_body(api_key: int, api_version: int, frame: bytes | memoryview, offset: int) -> object:
    """Decode the request body starting at ``offset``: Produce by hand, the rest with kio's schema."""
    if api_key == PRODUCE:  # by hand: its records stay slices of the frame
        if api_version <= LEGACY_PRODUCE_MAX:
            return produce_request.decode(memoryview(legacy_produce.as_v3_request_body(frame[offset:])), 0, 3)
        return produce_request.decode(memoryview(frame), offset, api_version)
    schema = request_type(api_key, api_version)
    assert schema is not None, f"kio has no api key {api_key} v{api_version}"  # decode_request checked
    if isinstance(frame, memoryview) and not frame.readonly:
        frame = frame.toreadonly()  # kio reads only read-only buffers (a connection's frames are writable)
    edits = check_body(schema, frame, offset)  # no declared length the data does not back
    if edits:
        frame = apply_edits(frame, edits)  # unknown tagged fields are ignored (KIP-482)
    try:
        request, _size = _reader(schema)(frame, offset)
    except Exception as exc:
        # Everything kio's native reader raises here comes from the bytes: its own
        # DecodeError family, ValueError (over-long varints), KeyError (tags it does
        # not know), UnicodeDecodeError. The server needs one type for all of them.
        raise MalformedRequest(f"{type(exc).__name__}: {exc}") from exc
    return request


def _best_effort_header(frame: bytes | memoryview) -> RequestHeader:
    """The header of a request we will not serve, for the error answer and the log.
    Every header version from v1 up starts the same way, so the client id is readable
    without knowing the version; if even that fails, keep the fixed prefix."""
    api_key, api_version, correlation_id = peek_prefix(frame)
    if not (api_key == CONTROLLED_SHUTDOWN and api_version == 0):
        try:
            return parse_request_header(frame, 1)[0]
        except MalformedRequest:
            pass
    return RequestHeader(api_key, api_version, correlation_id, None, 0)


def encode_response(header: RequestHeader, response: Payload) -> bytes:
    """The framed response to the request ``header`` described."""
    api_key = header.api_key
    if response.__api_key__ != api_key:
        raise ValueError(f"response for api key {response.__api_key__} to a request with key {api_key}")
    legacy = api_key == PRODUCE and 0 <= header.api_version <= LEGACY_PRODUCE_MAX
    wire_version = header.api_version if legacy else int(response.__version__)
    if not legacy and wire_version != header.api_version and not (api_key == API_VERSIONS and wire_version == 0):
        raise ValueError(f"v{wire_version} response to a v{header.api_version} request (api key {api_key})")

    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")  # size, patched below
    out.write(encode_response_header(header.correlation_id, response_header_version(api_key, wire_version)))
    if legacy:
        legacy_produce.write_response(out, response, wire_version)
    else:
        entity_writer(type(response))(out, response)
    buf = out.getbuffer()
    _int32.pack_into(buf, 0, len(buf) - 4)
    del buf  # release the export so getvalue() may copy
    return out.getvalue()
