"""The records of ``__transaction_state``, in Kafka's layouts, so a directory
moves between Kafka and hpbroker with its transactions.

The key and the value each start with an int16 schema version; the rest is
Kafka's classic encoding (int16-length strings, int32-count arrays, big-endian)::

    TransactionLogKey    v0: version int16 | transactionalId string
    TransactionLogValue  v0: version int16 | producerId int64 | producerEpoch int16
                             | transactionTimeoutMs int32 | transactionStatus int8
                             | transactionPartitions [topic string | partitionIds [int32]]?  (null: none)
                             | lastUpdateTimestampMs int64 | startTimestampMs int64
                         v1: the same fields, flexible (compact lengths, tagged fields
                             for the previous/next producer id and client transaction version)

We write v0 (what Kafka writes for clients without transaction version 2) and
read both.  A null value is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hpbroker.varint import decode_uvarint

KEY_VERSION = 0
VALUE_VERSION = 0

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class TransactionLogError(ValueError):
    """A key or value of ``__transaction_state`` that does not decode."""


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # a ``state.TxnState`` value
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != KEY_VERSION:
            raise TransactionLogError(f"transaction log key version {version} is unknown")
        (size,) = _I16.unpack_from(data, 2)
        if size < 0 or 4 + size > len(data):
            raise TransactionLogError("transaction log key: bad transactional id length")
        return bytes(data[4:4 + size]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise TransactionLogError(f"transaction log key does not decode: {exc}") from None


def encode_value(value: TxnLogValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(value.producer_id) + _I16.pack(value.producer_epoch) + _I32.pack(value.timeout_ms)
    out += _I8.pack(value.status)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in value.partitions:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(by_topic))
        for topic, partitions in sorted(by_topic.items()):
            raw = topic.encode()
            out += _I16.pack(len(raw)) + raw + _I32.pack(len(partitions))
            for p in sorted(partitions):
                out += _I32.pack(p)
    out += _I64.pack(value.last_update_ms) + _I64.pack(value.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes, flexible: bool):
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def fixed(self, st: struct.Struct) -> int:
        (v,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return v

    def length(self, st: struct.Struct) -> int:
        """A length or count: compact (varint, +1) when flexible; -1 is null."""
        if self.flexible:
            n, self.pos = decode_uvarint(self.data, self.pos)
            return n - 1
        return self.fixed(st)

    def string(self) -> str:
        n = self.length(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise TransactionLogError("transaction log value: bad string length")
        s = bytes(self.data[self.pos:self.pos + n]).decode()
        self.pos += n
        return s

    def skip_tags(self) -> None:
        if self.flexible:
            count, self.pos = decode_uvarint(self.data, self.pos)
            for _ in range(count):
                _tag, self.pos = decode_uvarint(self.data, self.pos)
                size, self.pos = decode_uvarint(self.data, self.pos)
                self.pos += size


def decode_value(data: bytes) -> TxnLogValue:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version not in (0, 1):
            raise TransactionLogError(f"transaction log value version {version} is unknown")
        r = _Reader(data, flexible=version >= 1)
        r.pos = 2
        producer_id = r.fixed(_I64)
        epoch = r.fixed(_I16)
        timeout_ms = r.fixed(_I32)
        status = r.fixed(_I8)
        partitions: list[tuple[str, int]] = []
        topics = r.length(_I32)
        for _ in range(max(topics, 0)):
            topic = r.string()
            for _ in range(max(r.length(_I32), 0)):
                partitions.append((topic, r.fixed(_I32)))
            r.skip_tags()
        last_update = r.fixed(_I64)
        start = r.fixed(_I64)
        return TxnLogValue(producer_id, epoch, timeout_ms, status, tuple(partitions), last_update, start)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, TransactionLogError):
            raise
        raise TransactionLogError(f"transaction log value does not decode: {exc}") from None
