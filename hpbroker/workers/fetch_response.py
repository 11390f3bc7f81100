"""The Fetch response, written by hand so records can go out with sendfile.

The result is a list of pieces: ``bytes`` for everything the broker writes and
``FileRegion`` for record bytes that stay in the page cache; their total length
is in the frame's size prefix.  Body layout by version (Kafka's FetchResponse
schema, big-endian; v12+ flexible: compact lengths, tagged-field sections)::

    throttle_time_ms int32
    error_code int16, session_id int32                     v7+
    responses: array of
        topic string (v4-v12) | topic_id uuid (v13+)
        partitions: array of
            partition_index int32, error_code int16, high_watermark int64,
            last_stable_offset int64, log_start_offset int64 (v5+),
            aborted_transactions nullable array of (producer_id int64, first_offset int64),
            preferred_read_replica int32                   v11+
            records nullable bytes
"""

import struct
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from hpbroker.protocol import wire_out
from hpbroker.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_ZERO_UUID = bytes(16)


class FileRegion(NamedTuple):
    fd: int
    position: int
    size: int


@dataclass
class PartitionResult:
    index: int
    error: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list | None = None  # [(producer_id, first_offset)]
    records: object = None  # bytes, FileRegion or None


@dataclass
class TopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: list = field(default_factory=list)


class _Writer:
    def __init__(self, flexible: bool):
        self.flexible = flexible
        self.pieces: list = []
        self.buf = bytearray()

    def array_length(self, n: int | None) -> None:
        wire_out.array_length(self.buf, n, self.flexible)

    def string(self, text: str) -> None:
        wire_out.string(self.buf, text, self.flexible)

    def no_tags(self) -> None:
        if self.flexible:
            self.buf.append(0)

    def records(self, records) -> None:
        size = -1 if records is None else (records.size if isinstance(records, FileRegion) else len(records))
        if self.flexible:
            self.buf += encode_uvarint(size + 1)
        else:
            self.buf += _I32.pack(size)
        if isinstance(records, FileRegion):
            if records.size:
                self.pieces.append(bytes(self.buf))
                self.pieces.append(records)
                self.buf = bytearray()
        elif records:
            self.buf += records

    def finish(self) -> list:
        if self.buf:
            self.pieces.append(bytes(self.buf))
        return self.pieces


def encode_fetch_response(version: int, correlation_id: int, topics: list[TopicResult], *,
                          throttle_ms: int = 0, error: int = 0, session_id: int = 0) -> list:
    """The complete frame (size prefix, response header, body) as pieces."""
    flexible = version >= 12
    w = _Writer(flexible)
    w.buf += _I32.pack(0)  # size, patched below
    w.buf += _I32.pack(correlation_id)
    w.no_tags()  # response header v1 for flexible versions
    w.buf += _I32.pack(throttle_ms)
    if version >= 7:
        w.buf += _I16.pack(error) + _I32.pack(session_id)
    w.array_length(len(topics))
    for topic in topics:
        if version >= 13:
            w.buf += topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID  # kio reads zeros as None
        else:
            w.string(topic.name)
        w.array_length(len(topic.partitions))
        for p in topic.partitions:
            w.buf += _PARTITION_HEAD.pack(p.index, p.error, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                w.buf += _I64.pack(p.log_start_offset)
            w.array_length(None if p.aborted is None else len(p.aborted))
            for producer_id, first_offset in p.aborted or ():
                w.buf += _I64.pack(producer_id) + _I64.pack(first_offset)
                w.no_tags()
            if version >= 11:
                w.buf += _I32.pack(-1)  # preferred read replica: none
            w.records(p.records)
            w.no_tags()
        w.no_tags()
    w.no_tags()
    pieces = w.finish()
    total = sum(piece.size if isinstance(piece, FileRegion) else len(piece) for piece in pieces)
    first = bytearray(pieces[0])
    _I32.pack_into(first, 0, total - 4)
    pieces[0] = bytes(first)
    return pieces
