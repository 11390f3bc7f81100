"""Produce requests v3-v10 read by hand, so that each partition's records are
a slice of the request frame instead of a copy: the frame is a writable
memoryview of the bytes the connection received (``framing.FrameReader``),
and ``Log.append`` stamps the batches there and writes them as they came.
kio's reader would copy every batch into a new ``bytes``, and the log would
copy it once more to stamp it.

The result is a ``ProduceRequest`` of plain tuples with the attribute names
of kio's classes (``records`` a memoryview), so a handler reads it as it
reads kio's request: kio's frozen dataclasses and the timeout's timedelta
cost about 3 µs a request (a twentieth of a small produce in process), the
tuples a quarter of that.  ``as_kio()`` makes kio's for what walks its
schema (an error answer mirroring the request).

Layout (Kafka's ProduceRequest.json; from v9 flexible: compact lengths,
tagged fields after each structure):

* transactional_id nullable string, acks int16, timeout_ms int32
* topic_data array: name string, partition_data array: index int32,
  records nullable bytes

Every length and count must be backed by the bytes that follow, else the
request is malformed; unknown tagged fields are skipped (KIP-482); bytes after
the body are ignored, as Kafka ignores them.
"""

from __future__ import annotations

import datetime
import importlib
import struct
from functools import cache
from typing import NamedTuple, cast

from .exceptions import MalformedRequest
from .header import read_uvarint, skip_tagged_fields

FIRST_FLEXIBLE = 9
_int16 = struct.Struct(">h")
_int32 = struct.Struct(">i")
_acks_timeout = struct.Struct(">hi")


@cache
def _classes(version: int) -> tuple[type, type, type]:
    module = importlib.import_module(f"kio.schema.produce.v{version}.request")
    return module.ProduceRequest, module.TopicProduceData, module.PartitionProduceData


class PartitionProduceData(NamedTuple):
    index: int
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: tuple[PartitionProduceData, ...]


class ProduceRequest(NamedTuple):
    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.timeout_ms)

    def without_records(self) -> "ProduceRequest":
        """The same request with every partition's records left out: what an
        answer to it needs, without keeping the frame they are slices of."""
        return self._replace(topic_data=tuple(
            TopicProduceData(t.name, tuple(PartitionProduceData(p.index, None) for p in t.partition_data))
            for t in self.topic_data))

    def as_kio(self):
        """The same request as kio's classes of its version (records as bytes)."""
        request_type, topic_type, partition_type = _classes(self.version)
        return request_type(transactional_id=self.transactional_id, acks=self.acks, timeout=self.timeout,
                            topic_data=tuple(topic_type(name=t.name, partition_data=tuple(
                                partition_type(index=p.index, records=None if p.records is None else bytes(p.records))
                                for p in t.partition_data)) for t in self.topic_data))


def decode(frame: memoryview, pos: int, version: int) -> ProduceRequest:
    """The request body at ``pos`` of ``frame``; MalformedRequest if the bytes do not hold one."""
    flexible = version >= FIRST_FLEXIBLE
    end = len(frame)
    transactional_id, pos = _string(frame, pos, flexible, nullable=True, what="transactional_id")
    if pos + _acks_timeout.size > end:
        raise MalformedRequest("produce request truncated in acks/timeout_ms")
    acks, timeout_ms = _acks_timeout.unpack_from(frame, pos)
    pos += _acks_timeout.size
    topics = []
    count, pos = _count(frame, pos, flexible, "topic_data")
    for _ in range(count):
        name, pos = _string(frame, pos, flexible, nullable=False, what="topic name")
        partitions = []
        partition_count, pos = _count(frame, pos, flexible, "partition_data")
        for _ in range(partition_count):
            if pos + 4 > end:
                raise MalformedRequest("produce request truncated in a partition index")
            index = _int32.unpack_from(frame, pos)[0]
            records, pos = _bytes(frame, pos + 4, flexible)
            if flexible:
                pos = skip_tagged_fields(frame, pos, "produce request")
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            pos = skip_tagged_fields(frame, pos, "produce request")
        topics.append(TopicProduceData(cast(str, name), tuple(partitions)))  # not nullable: never None
    if flexible:
        skip_tagged_fields(frame, pos, "produce request")
    return ProduceRequest(version, transactional_id, acks, timeout_ms, tuple(topics))


def _length(frame: memoryview, pos: int, flexible: bool, width: struct.Struct) -> tuple[int, int]:
    """A length as the version writes it; -1 for null."""
    if flexible:
        if pos < len(frame) and frame[pos] < 0x80:  # one byte: every length below 127
            return frame[pos] - 1, pos + 1
        value, pos = read_uvarint(frame, pos)
        return value - 1, pos
    if pos + width.size > len(frame):
        raise MalformedRequest("produce request truncated in a length")
    return width.unpack_from(frame, pos)[0], pos + width.size


def _count(frame: memoryview, pos: int, flexible: bool, what: str) -> tuple[int, int]:
    start = pos
    count, pos = _length(frame, pos, flexible, _int32)
    if count < 0:
        raise MalformedRequest(f"produce request: a null {what} at byte {start} is not allowed here")
    if count > len(frame) - pos:  # each entry takes a byte at least: a count the bytes cannot back
        raise MalformedRequest(f"produce request: {what} array of {count} entries at byte {start} is longer "
                               f"than the {len(frame) - pos} bytes left")
    return count, pos


def _string(frame: memoryview, pos: int, flexible: bool, nullable: bool, what: str) -> tuple[str | None, int]:
    length, pos = _length(frame, pos, flexible, _int16)
    if length < 0:
        if nullable and length == -1:
            return None, pos
        raise MalformedRequest(f"produce request: {what} has length {length}")
    if pos + length > len(frame):
        raise MalformedRequest(f"produce request truncated in {what}")
    try:
        return bytes(frame[pos:pos + length]).decode("utf-8"), pos + length
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"produce request: {what} is not UTF-8: {exc}") from None


def _bytes(frame: memoryview, pos: int, flexible: bool) -> tuple[memoryview | None, int]:
    length, pos = _length(frame, pos, flexible, _int32)
    if length < 0:
        if length == -1:
            return None, pos
        raise MalformedRequest(f"produce request: records have length {length}")
    if pos + length > len(frame):
        raise MalformedRequest(f"produce request truncated in records ({length} bytes announced)")
    return frame[pos:pos + length], pos + length
