"""One record of a v2 batch, and its headers.

A record body inside a batch (all integers zig-zag varints, ``varlong`` where
the range needs 64 bits)::

    length          varint   bytes after this field
    attributes      int8     unused by Kafka, kept as read
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key bytes (never null),
                                   valueLength varint (-1 = null), value bytes)

Offsets and timestamps are stored relative to the batch, so the same encoder
and decoder take the batch's base offset and base timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpbroker.records.errors import CorruptRecordError, TruncatedRecordError
from hpbroker.records.varint import decode_varint, decode_varlong, encode_varint, encode_varlong


@dataclass(frozen=True, slots=True)
class Header:
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0

    def __post_init__(self):
        # A list of headers would make two equal records compare unequal.
        if type(self.headers) is not tuple:
            object.__setattr__(self, "headers", tuple(self.headers))


def _nullable(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + bytes(data)


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    """The record body, length prefix included, relative to the batch bases."""
    parts = [
        bytes((record.attributes & 0xFF,)),
        encode_varlong(record.timestamp - base_timestamp),
        encode_varint(record.offset - base_offset),
        _nullable(record.key),
        _nullable(record.value),
        encode_varint(len(record.headers)),
    ]
    for header in record.headers:
        if header.key is None:
            raise ValueError("a header key cannot be null")
        parts.append(_nullable(header.key))
        parts.append(_nullable(header.value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _read_bytes(buf, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"{what} has negative length {length}")
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"{what} of {length} bytes runs past the end of its record")
    return bytes(buf[pos : pos + length]), pos + length


def decode_record(buf, pos: int, base_offset: int, base_timestamp: int,
                  log_append_time: int | None = None) -> tuple[Record, int]:
    """Read one record body at ``pos``; returns ``(record, pos_after)``.

    ``log_append_time`` replaces the record's own timestamp, as Kafka's readers
    do for a batch whose timestamp type is LogAppendTime.
    """
    length, start = decode_varint(buf, pos)
    if length < 0:
        raise CorruptRecordError(f"record at byte {pos} has negative length {length}")
    end = start + length
    if end > len(buf):
        raise TruncatedRecordError(f"record at byte {pos} needs {length} bytes, {len(buf) - start} remain")
    if length < 1:
        raise CorruptRecordError(f"record at byte {pos} is empty")
    # Varints below are read from the whole buffer; a field that strays past
    # ``end`` is caught by the final position check.
    attributes = buf[start]
    ts_delta, p = decode_varlong(buf, start + 1)
    offset_delta, p = decode_varint(buf, p)
    key, p = _read_bytes(buf, p, end, "record key")
    value, p = _read_bytes(buf, p, end, "record value")
    count, p = decode_varint(buf, p)
    if count < 0:
        raise CorruptRecordError(f"record at byte {pos} has negative header count {count}")
    headers = []
    for _ in range(count):
        hkey, p = _read_bytes(buf, p, end, "header key")
        if hkey is None:
            raise CorruptRecordError(f"record at byte {pos} has a null header key")
        hvalue, p = _read_bytes(buf, p, end, "header value")
        headers.append(Header(hkey, hvalue))
        if p > end:
            break
    if p != end:
        raise CorruptRecordError(f"record at byte {pos} declares {length} bytes but its fields take {p - start}")
    timestamp = base_timestamp + ts_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, tuple(headers), attributes), end
