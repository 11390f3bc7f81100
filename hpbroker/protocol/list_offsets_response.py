"""The ListOffsets response (versions 1-11), written straight from the
partitions' answers: a consumer's position lookups and every "latest" poll,
where building kio objects and walking their schema cost more than the rest
of the request.

Layout, by version (Kafka's ListOffsetsResponse.json; v0, with its array of
old-style offsets, is not served):

* v1: [topic name, [partition index int32, error int16, timestamp int64, offset int64]]
* v2: throttle_time_ms int32 before the topics (v3: the same bytes)
* v4: each partition's leader_epoch int32 after its offset (v5: the same)
* v6 (flexible): compact arrays and strings, an empty tagged-field section
  after each partition, topic and the body, and response header v1;
  v7-v11 the same bytes

``tests/test_list_offsets_response.py`` holds these bytes equal to kio's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .wire_out import I32, NO_TAGS, array_length, framed, response_start, string

_V1 = struct.Struct(">ihqq")  # index, error, timestamp, offset
_V4 = struct.Struct(">ihqqi")  # and leader epoch
MIN_VERSION, MAX_VERSION = 1, 11

# (index, error code, timestamp, offset, leader epoch)
PartitionRow = tuple[int, int, int, int, int]


def encode(correlation_id: int, version: int, topics: Sequence[tuple[str, Sequence[PartitionRow]]],
           throttle_ms: int = 0) -> bytes:
    """The framed response (size prefix included)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"no ListOffsets response v{version} is written here")
    flexible = version >= 6
    out = response_start(correlation_id, flexible)
    if version >= 2:
        out += I32.pack(throttle_ms)
    array_length(out, len(topics), flexible)
    for name, partitions in topics:
        string(out, name, flexible)
        array_length(out, len(partitions), flexible)
        for index, error, timestamp, offset, leader_epoch in partitions:
            if version >= 4:
                out += _V4.pack(index, error, timestamp, offset, leader_epoch)
            else:
                out += _V1.pack(index, error, timestamp, offset)
            if flexible:
                out += NO_TAGS
        if flexible:
            out += NO_TAGS
    if flexible:
        out += NO_TAGS
    return framed(out)
