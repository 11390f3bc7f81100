"""The client's side of the codec: kio requests to frames, response frames to
kio responses, for a broker talking to another (a follower fetching from its
leader) and for the ZooKeeper consumer.  ``codec`` is the server's side.

``encode_request(request, correlation_id, client_id)`` returns the complete
frame, big-endian: size int32 (of what follows), then the request header of
the version the api key and version call for (``schemas``): api_key int16,
api_version int16, correlation_id int32; from v1 the client id as a string
with an int16 length (-1 = null); from v2 an empty tagged-field section; then
the body as kio writes it.  Produce v0-v2, which kio does not describe, are not
sent by this side.

``decode_response(api_key, version, frame)`` takes a frame without its size
prefix and returns ``(correlation_id, response)``: the caller matches the id
against the request it is due for (a connection answers in order) and the
api key and version say which kio class to read.

``MAX_RESPONSE_BYTES`` bounds a response's size prefix: above it the stream is
broken, not the response large, and the connection cannot be trusted.
"""

from __future__ import annotations

import io
import struct
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

from . import wire_out
from .header import skip_tagged_fields
from .schemas import request_header_version, response_header_version, response_type

_request_prefix = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_int32 = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 << 20  # a larger size prefix is a broken stream, not a response

_reader = cache(entity_reader)
_writer = cache(entity_writer)


def request_start(api_key: int, version: int, correlation_id: int, client_id: str | None) -> bytearray:
    """A request frame's first bytes: its size, to be set by ``wire_out.framed``,
    and the request header of the version the api key and version call for."""
    out = bytearray(_request_prefix.pack(0, api_key, version, correlation_id))
    header_version = request_header_version(api_key, version)
    if header_version >= 1:
        wire_out.string(out, client_id, flexible=False)  # the client id keeps its int16 length in every version
    if header_version >= 2:
        out += wire_out.NO_TAGS
    return out


def encode_request(request, correlation_id: int, client_id: str | None) -> bytes:
    """The framed ``request`` (a kio request object), size prefix included."""
    out = io.BytesIO()
    out.write(request_start(int(request.__api_key__), int(request.__version__), correlation_id, client_id))
    _writer(type(request))(out, request)
    buf = out.getbuffer()
    _int32.pack_into(buf, 0, len(buf) - 4)
    del buf  # release the export so getvalue() may copy
    return out.getvalue()


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response) from a frame without its size prefix."""
    correlation_id = _int32.unpack_from(frame, 0)[0]
    offset = 4
    if response_header_version(api_key, version) >= 1:
        offset = skip_tagged_fields(frame, offset)
    response, _size = _reader(response_type(api_key, version))(frame, offset)
    return correlation_id, response
