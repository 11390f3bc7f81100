"""Produce v0-v2, which kio (generated from Kafka 4's specs) no longer describes.

Handlers see these versions as kio's Produce v3 classes; this module converts on
the wire. Layouts, relative to v3:

* Request v0, v1, v2: v3 without the leading transactional_id (nullable int16
  string). We decode by prepending a null transactional_id (0xFFFF) and running
  kio's v3 reader: one copy of a rare request instead of a second schema.
* Response v2: identical to v3 (v3 only changed the request), so kio's v3 writer
  serves it as is.
* Response v1: v2 without each partition's log_append_time (int64).
* Response v0: v1 without the trailing throttle_time_ms (int32).
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.serial import entity_writer

from .schemas import response_type

NULL_TRANSACTIONAL_ID = b"\xff\xff"

_int16 = struct.Struct(">h")
_int32 = struct.Struct(">i")
_partition_v0 = struct.Struct(">ihq")  # index, error_code, base_offset


def as_v3_request_body(body: bytes | memoryview) -> bytes:
    """The v0-v2 request body rewritten as a v3 body with a null transactional id."""
    return NULL_TRANSACTIONAL_ID + bytes(body)


def write_response(out: io.BytesIO, response: Any, api_version: int) -> None:
    """Write a kio Produce v3 response object in the v0, v1 or v2 layout."""
    if api_version == 2:
        schema = response_type(0, 3)
        assert schema is not None
        entity_writer(schema)(out, response)
        return
    out.write(_int32.pack(len(response.responses)))
    for topic in response.responses:
        name = topic.name.encode("utf-8")
        out.write(_int16.pack(len(name)))
        out.write(name)
        out.write(_int32.pack(len(topic.partition_responses)))
        for part in topic.partition_responses:
            out.write(_partition_v0.pack(part.index, part.error_code, part.base_offset))
    if api_version == 1:
        out.write(_int32.pack(round(response.throttle_time.total_seconds() * 1000)))
