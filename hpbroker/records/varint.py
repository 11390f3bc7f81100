"""Zig-zag varints of the record format.

Signed values are zig-zag mapped to unsigned ones so that small negative
numbers stay short (``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...``), then written as
the unsigned varints of ``hpbroker.varint``.  Kafka uses *varint* (fits int32,
at most 5 bytes) for lengths, offset deltas and counts, and *varlong* (fits
int64, at most 10 bytes) for the timestamp delta.  Decoders take
``(buf, pos)`` and return ``(value, new_pos)`` so a caller can walk a buffer
without slicing it; bad bytes raise the record errors (a torn tail
``TruncatedRecordError``, anything else ``CorruptRecordError``).
"""

from hpbroker.records.errors import CorruptRecordError, TruncatedRecordError
from hpbroker.varint import UINT32_BITS, UINT64_BITS, TruncatedVarint, VarintError, decode_uvarint, encode_uvarint

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def zigzag(value: int) -> int:
    """Signed -> unsigned (valid for any Python int, not only 64-bit)."""
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of an int32."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_uvarint(zigzag(value), UINT32_BITS)


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint of an int64."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_uvarint(zigzag(value), UINT64_BITS)


def _decode_zigzag(buf, pos: int, bits: int, what: str) -> tuple[int, int]:
    try:
        raw, pos = decode_uvarint(buf, pos, bits, what)
    except TruncatedVarint as exc:
        raise TruncatedRecordError(str(exc)) from None
    except VarintError as exc:
        raise CorruptRecordError(str(exc)) from None
    return unzigzag(raw), pos


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag int32; returns ``(value, pos_after)``."""
    return _decode_zigzag(buf, pos, UINT32_BITS, "varint")


def decode_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag int64; returns ``(value, pos_after)``."""
    return _decode_zigzag(buf, pos, UINT64_BITS, "varlong")


def size_of_varint(value: int) -> int:
    """Encoded length of the zig-zag varint/varlong of ``value``."""
    raw = zigzag(value)
    return max(1, (raw.bit_length() + 6) // 7)
