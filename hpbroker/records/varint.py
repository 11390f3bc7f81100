"""Variable-length integers of the record format (protobuf style, big groups last).

Each byte carries 7 bits of the value, least significant group first; the high
bit says another byte follows.  Signed values are zig-zag mapped first so that
small negative numbers stay short: ``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...``.

Kafka uses *varint* (signed, fits int32, at most 5 bytes) for lengths, offset
deltas and counts, *varlong* (signed, fits int64, at most 10 bytes) for the
timestamp delta, and *unsigned varint* for the compact lengths of flexible
protocol versions.  Decoders take ``(buf, pos)`` and return ``(value, new_pos)``
so a caller can walk a buffer without slicing it.
"""

from hpbroker.records.errors import CorruptRecordError, TruncatedRecordError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_unsigned(buf, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise TruncatedRecordError(f"{what} at byte {pos} is cut off after {i} byte(s)")
        byte = buf[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptRecordError(f"{what} at byte {pos} is longer than {max_bytes} bytes")


def zigzag(value: int) -> int:
    """Signed -> unsigned (valid for any Python int, not only 64-bit)."""
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of an int32."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(zigzag(value))


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint of an int64."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(zigzag(value))


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of a uint32 (compact lengths of flexible versions)."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of uint32 range: {value}")
    return _encode_unsigned(value)


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag int32; returns ``(value, pos_after)``."""
    raw, pos = _decode_unsigned(buf, pos, VARINT_MAX_BYTES, "varint")
    if raw > 0xFFFFFFFF:  # 5 groups hold 35 bits; an int32 needs 32
        raise CorruptRecordError(f"varint ending at byte {pos} does not fit in int32")
    return unzigzag(raw), pos


def decode_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag int64; returns ``(value, pos_after)``."""
    raw, pos = _decode_unsigned(buf, pos, VARLONG_MAX_BYTES, "varlong")
    if raw > 0xFFFFFFFFFFFFFFFF:  # 10 groups hold 70 bits; an int64 needs 64
        raise CorruptRecordError(f"varlong ending at byte {pos} does not fit in int64")
    return unzigzag(raw), pos


def decode_uvarint(buf, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned uint32 varint; returns ``(value, pos_after)``."""
    raw, pos = _decode_unsigned(buf, pos, VARINT_MAX_BYTES, "unsigned varint")
    if raw > 0xFFFFFFFF:
        raise CorruptRecordError(f"unsigned varint ending at byte {pos} does not fit in uint32")
    return raw, pos


def size_of_varint(value: int) -> int:
    """Encoded length of the zig-zag varint/varlong of ``value``."""
    raw = zigzag(value)
    return max(1, (raw.bit_length() + 6) // 7)
