"""Unsigned variable-length integers (LEB128): the one codec behind Kafka's
compact lengths and tagged fields on the wire and the record format's varints.

Each byte carries 7 bits of the value, least significant group first; the high
bit says another byte follows.  Every value has a width, ``bits`` (32 unless
said: a uint32, or an int32 once the record format has zig-zag mapped it; 64
for a varlong).  A ``bits``-wide value takes at most ``ceil(bits / 7)`` bytes,
and a wider value is refused even when its byte count fits (5 bytes hold 35
bits, a uint32 needs 32).  The decoder takes ``(buf, pos)`` and returns
``(value, pos_after)`` so a caller walks a buffer without slicing it.

Errors are this module's own (``ValueError`` subclasses) so that every layer
can use it and keep its own error types: the wire layer turns them into
``MalformedRequest``, the record layer into ``TruncatedRecordError`` /
``CorruptRecordError``.  Nothing here imports the rest of hpbroker.
"""

UINT32_BITS = 32
UINT64_BITS = 64


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


class VarintError(ValueError):
    """The bytes at ``start`` are not a varint of the width asked for."""

    def __init__(self, message: str, start: int):
        super().__init__(message)
        self.start = start


class TruncatedVarint(VarintError):
    """The buffer ends inside the varint (a torn tail, or a short request)."""


class OverlongVarint(VarintError):
    """More bytes than the width allows, or a value wider than it."""


def max_bytes(bits: int = UINT32_BITS) -> int:
    """The longest varint of a ``bits``-wide value: 5 for 32 bits, 10 for 64."""
    return (bits + 6) // 7


def encode_uvarint(value: int, bits: int = UINT32_BITS) -> bytes:
    """The varint of ``value``, which must fit in ``bits`` unsigned bits."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0 or value >> bits:
        raise ValueError(f"unsigned varint out of {bits}-bit range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(buf, pos: int = 0, bits: int = UINT32_BITS, what: str = "unsigned varint") -> tuple[int, int]:
    """Read a varint of at most ``bits`` (7 or more) bits at ``buf[pos]``;
    returns ``(value, pos_after)``.

    ``what`` names the field in error messages.  Raises ``TruncatedVarint``
    when ``buf`` ends first, ``OverlongVarint`` when the varint is longer or
    its value wider than ``bits`` allows.
    """
    end = len(buf)
    if pos >= end:
        raise TruncatedVarint(f"{what} at byte {pos} is cut off after 0 byte(s)", pos)
    byte = buf[pos]
    if byte < 0x80:  # the common case: short strings, small arrays, no tags
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    p = pos + 1
    limit = pos + (bits + 6) // 7
    while p < limit:
        if p >= end:
            raise TruncatedVarint(f"{what} at byte {pos} is cut off after {p - pos} byte(s)", pos)
        byte = buf[p]
        p += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> bits:
                raise OverlongVarint(f"{what} at byte {pos} does not fit in {bits} bits", pos)
            return result, p
        shift += 7
    raise OverlongVarint(f"{what} at byte {pos} is longer than {limit - pos} bytes", pos)
