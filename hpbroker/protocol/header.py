"""Request header parsing and response header encoding.

Request header layouts (all big-endian):

* v0: api_key int16, api_version int16, correlation_id int32.
* v1: v0 + client_id as a nullable string with an int16 length (-1 = null).
* v2: v1 + a tagged-field section (unsigned varint count, then per field an
  unsigned varint tag, an unsigned varint size and the bytes). ClientId keeps its
  int16 length even though v2 is "flexible" (KIP-482 kept it so that any broker
  can read the client id of any request).

Response headers: v0 is correlation_id int32; v1 adds an (empty) tagged-field
section. Which version applies depends on whether the API version is flexible,
decided by ``schemas``; ApiVersions responses are always v0 so that a client
whose request version we reject can still read the answer.

The header is hand-parsed rather than read with kio because it is on every
request and the server needs the api key before it can pick a body schema.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from hpbroker.varint import (
    VarintError,
    decode_uvarint,
    encode_uvarint as write_uvarint,  # noqa: F401  re-exported: compact lengths as the protocol writes them
)

from .exceptions import MalformedRequest

_prefix = struct.Struct(">hhi")
_int16 = struct.Struct(">h")
_int32 = struct.Struct(">i")

PREFIX_SIZE = _prefix.size  # api_key, api_version, correlation_id: fixed in every version


class RequestHeader(NamedTuple):  # a tuple: every request makes one, and a frozen dataclass costs 4x as much
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


def peek_prefix(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part every header version shares."""
    if len(frame) < PREFIX_SIZE:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    return _prefix.unpack_from(frame, 0)


def parse_request_header(frame: bytes | memoryview, header_version: int) -> tuple[RequestHeader, int]:
    """Parse the header at the start of ``frame``; return it and the body's offset."""
    if header_version not in (0, 1, 2):
        raise ValueError(f"request header version {header_version} does not exist")
    api_key, api_version, correlation_id = peek_prefix(frame)
    pos = PREFIX_SIZE
    client_id = None
    if header_version >= 1:
        client_id, pos = _read_client_id(frame, pos)
    if header_version == 2:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version), pos


def _read_client_id(frame: bytes | memoryview, pos: int) -> tuple[str | None, int]:
    if len(frame) < pos + 2:
        raise MalformedRequest("request header truncated in client_id length")
    (length,) = _int16.unpack_from(frame, pos)
    pos += 2
    if length == -1:
        return None, pos
    if length < 0:
        raise MalformedRequest(f"negative client_id length {length}")
    end = pos + length
    if end > len(frame):
        raise MalformedRequest("request header truncated in client_id")
    try:
        return bytes(frame[pos:end]).decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"client_id is not UTF-8: {exc}") from None


def read_uvarint(frame: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A uint32 varint (at most 5 bytes); a bad one makes the request malformed."""
    try:
        return decode_uvarint(frame, pos)
    except VarintError as exc:
        raise MalformedRequest(str(exc)) from None


def skip_tagged_fields(frame: bytes | memoryview, pos: int, where: str = "request header") -> int:
    """Skip a tagged-field section whose tags are all unknown (the header defines
    none), as KIP-482 requires; ``where`` names the part for the error."""
    if pos < len(frame) and frame[pos] == 0:  # no tagged fields: nearly always
        return pos + 1
    count, pos = read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(frame, pos)
        size, pos = read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise MalformedRequest(f"{where} truncated in a tagged field")
    return pos


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """v0: the correlation id; v1: plus an empty tagged-field section."""
    if header_version == 0:
        return _int32.pack(correlation_id)
    if header_version == 1:
        return _int32.pack(correlation_id) + b"\x00"
    raise ValueError(f"response header version {header_version} does not exist")
