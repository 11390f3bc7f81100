"""The Produce response (every version, 0-10), written straight from the
partitions' results: the answer to every produce request, where building kio
objects and walking their schema cost a fifth of the request.

Layout, by version (Kafka's ProduceResponse.json):

* v0: [topic name, [partition index int32, error int16, base offset int64]]
* v1: and throttle_time_ms int32 after the topics
* v2: each partition's log_append_time int64 after its base offset
* v5: each partition's log_start_offset int64 after that
* v8: each partition's record_errors [batch index int32, message nullable
  string] and error_message nullable string after that
* v9 (flexible): compact arrays and strings, an empty tagged-field section
  after each partition, record error, topic and the body, and response
  header v1 (the correlation id and its own empty tagged fields)
* v10: the same bytes (its new fields, the current leader and the node
  endpoints, are tagged: only sent with NOT_LEADER_OR_FOLLOWER hints, which
  hpbroker does not give)

``tests/test_produce_response.py`` holds these bytes equal to kio's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .wire_out import I32 as _I32, NO_TAGS, array_length as _array_length, framed, response_start, string as _string

_V0 = struct.Struct(">ihq")  # index, error, base offset
_V2 = struct.Struct(">ihqq")  # and log_append_time
_V5 = struct.Struct(">ihqqq")  # and log_start_offset
MAX_VERSION = 10

# (index, error code, base offset, log append time, log start offset, error message or None)
PartitionRow = tuple[int, int, int, int, int, "str | None"]


def encode(correlation_id: int, version: int, topics: Sequence[tuple[str, Sequence[PartitionRow]]],
           throttle_ms: int = 0) -> bytes:
    """The framed response (size prefix included)."""
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"no Produce response v{version}")
    flexible = version >= 9
    out = response_start(correlation_id, flexible)
    _array_length(out, len(topics), flexible)
    for name, partitions in topics:
        _string(out, name, flexible)
        _array_length(out, len(partitions), flexible)
        for index, error, base_offset, append_time, log_start, message in partitions:
            if version >= 5:
                out += _V5.pack(index, error, base_offset, append_time, log_start)
            elif version >= 2:
                out += _V2.pack(index, error, base_offset, append_time)
            else:
                out += _V0.pack(index, error, base_offset)
            if version >= 8:
                _array_length(out, 0, flexible)  # record_errors: hpbroker rejects a batch whole
                _string(out, message, flexible)
            if flexible:
                out += NO_TAGS
        if flexible:
            out += NO_TAGS
    if version >= 1:
        out += _I32.pack(throttle_ms)
    if flexible:
        out += NO_TAGS
    return framed(out)

