"""Legacy message sets: magic 0 (Kafka 0.8-0.9) and magic 1 (0.10).

One message (offsets from ``hpbroker.kernels.layout``, big-endian)::

    0  offset       int64   absolute; for a compressed wrapper, see below
    8  messageSize  int32   bytes after this field
    12 crc          uint32  CRC-32 (zlib/IEEE) of bytes [16, end)
    16 magic        int8    0 or 1
    17 attributes   int8    bits 0-2 codec, bit 3 timestamp type (magic 1:
                            1 = LogAppendTime)
    18 timestamp    int64   magic 1 only
    ..  keyLength   int32   -1 = null, then the key
    ..  valueLength int32   -1 = null, then the value

A message set is such messages back to back.  A compressed message is a
*wrapper*: its value is a compressed message set of uncompressed inner
messages.  Inner offsets are absolute in magic 0.  In magic 1 they are relative
(the producer numbers them 0..n-1) and the wrapper's offset is the absolute
offset of the last inner message, so
``absolute = wrapper.offset - last_inner.offset + inner.offset``.  A magic-1
wrapper marked LogAppendTime gives its timestamp to every inner message.

Kafka 0.8-0.10 computed the LZ4 frame header checksum over the frame magic as
well as the descriptor (KAFKA-3160) and kept writing it that way in magic 0;
the reader rewrites that byte to the specified value before decompressing.
Snappy wrappers are xerial-framed or raw; ``compression.decompress`` takes both.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterable

from hpbroker.kernels import layout
from hpbroker.records.compression import compress, decompress, lz4_descriptor_end, lz4_header_checksum
from hpbroker.records.errors import CorruptRecordError, InvalidCrcError, TruncatedRecordError
from hpbroker.records.record import Record

_PREFIX = struct.Struct(">qiIbb")  # offset, messageSize, crc, magic, attributes
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_MIN_SIZE = {0: layout.LEGACY_V0_MIN_SIZE, 1: layout.LEGACY_V1_MIN_SIZE}
_KEY_POS = {0: layout.LEGACY_V0_KEY, 1: layout.LEGACY_V1_KEY}


@dataclass(frozen=True, slots=True)
class LegacyRecord(Record):
    """A record read from a legacy message set; ``magic`` is its message's."""

    magic: int = 0


@dataclass(frozen=True, slots=True)
class _Message:
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    size: int  # whole message, offset field included

    @property
    def codec(self) -> int:
        return self.attributes & layout.LEGACY_COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic == 1 and bool(self.attributes & layout.LEGACY_TIMESTAMP_TYPE_BIT)


def _read_bytes(buf, pos: int, end: int, what: str, at: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"message at byte {at}: {what} length runs past the message")
    (length,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise CorruptRecordError(f"message at byte {at}: {what} of {length} bytes does not fit the message")
    return bytes(buf[pos : pos + length]), pos + length


def read_message(buf, pos: int = 0, *, verify_crc: bool = True) -> _Message:
    """Parse one message (without looking inside a compressed value)."""
    remaining = len(buf) - pos
    if remaining < layout.MAGIC_PROBE_SIZE + 1:
        raise TruncatedRecordError(f"message at byte {pos} needs at least {layout.MAGIC_PROBE_SIZE + 1} bytes, "
                                   f"{max(0, remaining)} remain")
    offset, size, crc, magic, attributes = _PREFIX.unpack_from(buf, pos)
    if magic not in _MIN_SIZE:
        raise CorruptRecordError(f"message at byte {pos} has magic {magic}, not 0 or 1")
    total = size + layout.LOG_OVERHEAD
    if total < _MIN_SIZE[magic]:
        raise CorruptRecordError(f"message at byte {pos} has size {size}, below the magic-{magic} minimum")
    if total > remaining:
        raise TruncatedRecordError(f"message at byte {pos} is {total} bytes, only {remaining} remain")
    end = pos + total
    if verify_crc:
        computed = zlib.crc32(memoryview(buf)[pos + layout.LEGACY_CRC_START : end])
        if computed != crc:
            raise InvalidCrcError(f"message at byte {pos} (offset {offset}) has CRC {crc:#010x}, "
                                  f"computed {computed:#010x}", stored=crc, computed=computed)
    timestamp = _INT64.unpack_from(buf, pos + layout.LEGACY_TIMESTAMP)[0] if magic == 1 else layout.NO_TIMESTAMP
    key, p = _read_bytes(buf, pos + _KEY_POS[magic], end, "key", pos)
    value, p = _read_bytes(buf, p, end, "value", pos)
    if p != end:
        raise CorruptRecordError(f"message at byte {pos} has {end - p} bytes after its value")
    return _Message(offset, magic, attributes & 0xFF, timestamp, key, value, total)


def _fix_kafka3160(frame: bytes) -> bytes:
    """Give a magic-0 LZ4 frame the header checksum the LZ4 spec expects."""
    hc = lz4_descriptor_end(frame)
    fixed = bytearray(frame)
    fixed[hc] = lz4_header_checksum(frame)
    return bytes(fixed)


def _inner_messages(wrapper: _Message, at: int, verify_crc: bool) -> list[_Message]:
    if wrapper.value is None:
        raise CorruptRecordError(f"compressed message at byte {at} has a null value")
    payload = wrapper.value
    if wrapper.codec == layout.CODEC_LZ4 and wrapper.magic == 0:
        payload = _fix_kafka3160(payload)
    data = decompress(wrapper.codec, payload)
    inner = []
    p = 0
    try:
        while p < len(data):
            message = read_message(data, p, verify_crc=verify_crc)
            if message.codec != layout.CODEC_NONE:
                raise CorruptRecordError(f"compressed message at byte {at} nests another compressed message")
            inner.append(message)
            p += message.size
    except TruncatedRecordError as exc:
        raise CorruptRecordError(f"compressed message at byte {at}: inner {exc}") from exc
    return inner


def decode_message_set(buf, pos: int = 0, *, verify_crc: bool = True,
                       allow_partial_tail: bool = False) -> list[LegacyRecord]:
    """Every record of a magic 0/1 message set, wrappers expanded, offsets absolute."""
    records: list[LegacyRecord] = []
    end = len(buf)
    while pos < end:
        try:
            message = read_message(buf, pos, verify_crc=verify_crc)
        except TruncatedRecordError:
            if allow_partial_tail:
                break
            raise
        if message.codec == layout.CODEC_NONE:
            records.append(LegacyRecord(message.offset, message.timestamp, message.key, message.value,
                                        (), message.attributes, message.magic))
        else:
            inner = _inner_messages(message, pos, verify_crc)
            # Magic 1 numbers inner messages relative to the wrapper's last one.
            base = message.offset - inner[-1].offset if (inner and message.magic > 0) else 0
            for m in inner:
                timestamp = message.timestamp if message.log_append_time else m.timestamp
                records.append(LegacyRecord(base + m.offset, timestamp, m.key, m.value, (), m.attributes, m.magic))
        pos += message.size
    return records


# --- writing (tests, tools) ------------------------------------------------------

def encode_message(offset: int, key: bytes | None, value: bytes | None, *, magic: int,
                   timestamp: int = layout.NO_TIMESTAMP, attributes: int = 0) -> bytes:
    """One legacy message with a valid CRC."""
    if magic not in _MIN_SIZE:
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    parts = [struct.pack(">bb", magic, attributes)]
    if magic == 1:
        parts.append(_INT64.pack(timestamp))
    for data in (key, value):
        if data is None:
            parts.append(_INT32.pack(-1))
        else:
            parts.append(_INT32.pack(len(data)))
            parts.append(bytes(data))
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def encode_message_set(records: Iterable[Record], *, magic: int, compression: int = layout.CODEC_NONE,
                       log_append_time: int | None = None, kafka3160_lz4: bool | None = None) -> bytes:
    """A message set as the old producers wrote it.

    Uncompressed: one message per record.  Compressed: one wrapper holding the
    records, inner offsets relative (magic 1) or absolute (magic 0), the
    wrapper at the last record's offset.  ``log_append_time`` (magic 1) marks
    the wrapper LogAppendTime with that timestamp.  ``kafka3160_lz4`` writes
    the LZ4 header checksum the way Kafka did for magic 0 (the default there).
    """
    records = list(records)
    if compression == layout.CODEC_NONE:
        return b"".join(encode_message(r.offset, r.key, r.value, magic=magic, timestamp=r.timestamp) for r in records)
    if not records:
        raise ValueError("a compressed wrapper needs at least one record")
    first = records[0].offset
    inner = b"".join(
        encode_message(r.offset - first if magic > 0 else r.offset, r.key, r.value, magic=magic, timestamp=r.timestamp)
        for r in records)
    payload = compress(compression, inner)
    if kafka3160_lz4 is None:
        kafka3160_lz4 = magic == 0
    if compression == layout.CODEC_LZ4 and kafka3160_lz4:
        broken = bytearray(payload)
        broken[lz4_descriptor_end(payload)] = lz4_header_checksum(payload, kafka3160=True)
        payload = bytes(broken)
    attributes = compression
    timestamp = max(r.timestamp for r in records)
    if log_append_time is not None:
        attributes |= layout.LEGACY_TIMESTAMP_TYPE_BIT
        timestamp = log_append_time
    return encode_message(records[-1].offset, None, payload, magic=magic, timestamp=timestamp, attributes=attributes)
