"""What the hand-written encoders share (the Produce, ListOffsets and Fetch
responses, a follower's Fetch request): Kafka's lengths in the
classic layout (int32 arrays, int16 strings, -1 for null) and in the flexible
one (KIP-482: unsigned varints of length + 1, 0 for null; an empty tagged-field
section is one zero byte), appended to a bytearray."""

from __future__ import annotations

import struct

from hpbroker.varint import encode_uvarint

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
NO_TAGS = b"\x00"


def uvarint(value: int) -> bytes:
    return bytes((value,)) if value < 0x80 else encode_uvarint(value)


def array_length(out: bytearray, length: int | None, flexible: bool) -> None:
    """An array's length; None: a null array."""
    if flexible:
        out += uvarint(0 if length is None else length + 1)
    else:
        out += I32.pack(-1 if length is None else length)


def string(out: bytearray, text: str | None, flexible: bool) -> None:
    """A (nullable) string, its length first."""
    if text is None:
        out += b"\x00" if flexible else I16.pack(-1)
        return
    data = text.encode()
    out += uvarint(len(data) + 1) if flexible else I16.pack(len(data))
    out += data


def response_start(correlation_id: int, flexible: bool) -> bytearray:
    """A response frame's first bytes: its size, to be set by ``framed``, and
    the response header (v1, for a flexible version, adds an empty tag section)."""
    out = bytearray(I32.pack(0))
    out += I32.pack(correlation_id)
    if flexible:
        out += NO_TAGS
    return out


def framed(out: bytearray) -> bytes:
    """The frame ``response_start`` began, its size set."""
    I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
