"""The shared unsigned varint codec: known encodings, round trips, the width
bound on both sides, and errors that say where and what."""

import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.varint import (
    UINT64_BITS,
    OverlongVarint,
    TruncatedVarint,
    VarintError,
    decode_uvarint,
    encode_uvarint,
    max_bytes,
)


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                            (300, b"\xac\x02"), (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"),
                                            (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f")])
def test_known_encodings(value, encoded):
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded) == (value, len(encoded))


def test_64_bit_extremes():
    top = (1 << 64) - 1
    assert encode_uvarint(top, UINT64_BITS) == b"\xff" * 9 + b"\x01"
    assert decode_uvarint(b"\xff" * 9 + b"\x01", 0, UINT64_BITS) == (top, 10)


def test_max_bytes():
    assert (max_bytes(), max_bytes(32), max_bytes(64)) == (5, 5, 10)


@settings(max_examples=300)
@given(st.integers(0, 0xFFFFFFFF))
def test_uint32_round_trip(value):
    data = encode_uvarint(value)
    assert len(data) <= 5 and len(data) == max(1, (value.bit_length() + 6) // 7)
    assert decode_uvarint(data) == (value, len(data))


@settings(max_examples=200)
@given(st.lists(st.integers(0, (1 << 64) - 1), max_size=8), st.binary(max_size=4))
def test_walks_a_buffer_by_position(values, prefix):
    buf = memoryview(prefix + b"".join(encode_uvarint(v, UINT64_BITS) for v in values))
    pos, out = len(prefix), []
    for _ in values:
        value, pos = decode_uvarint(buf, pos, UINT64_BITS)
        out.append(value)
    assert out == values and pos == len(buf)


@pytest.mark.parametrize("value, bits", [(-1, 32), (1 << 32, 32), (-1, 64), (1 << 64, 64)])
def test_encoder_refuses_values_outside_the_width(value, bits):
    with pytest.raises(ValueError, match=f"out of {bits}-bit range"):
        encode_uvarint(value, bits)


@pytest.mark.parametrize("data, pos", [(b"", 0), (b"\x80", 0), (b"\xff\xff", 0), (b"\x80\x80\x80\x80", 0),
                                       (b"\x00\x00", 2), (b"\x00", 5)])
def test_truncated(data, pos):
    with pytest.raises(TruncatedVarint) as info:
        decode_uvarint(data, pos)
    assert info.value.start == pos
    assert str(info.value) == f"unsigned varint at byte {pos} is cut off after {max(len(data) - pos, 0)} byte(s)"


def test_longer_than_the_width_allows_even_when_more_bytes_follow():
    with pytest.raises(OverlongVarint, match=r"^length at byte 1 is longer than 5 bytes$") as info:
        decode_uvarint(b"\x00" + b"\x80" * 5 + b"\x00", 1, what="length")
    assert info.value.start == 1 and not isinstance(info.value, TruncatedVarint)
    with pytest.raises(OverlongVarint, match="longer than 10 bytes"):
        decode_uvarint(b"\x80" * 10 + b"\x00", 0, UINT64_BITS)


@pytest.mark.parametrize("data, bits", [(b"\xff\xff\xff\xff\x1f", 32), (b"\x80\x80\x80\x80\x10", 32),
                                        (b"\xff" * 9 + b"\x03", 64)])
def test_value_wider_than_the_width(data, bits):
    # Five bytes hold 35 bits; a uint32 needs 32, so the top three must be clear.
    with pytest.raises(OverlongVarint, match=f"does not fit in {bits} bits"):
        decode_uvarint(data, 0, bits)


def test_errors_are_value_errors():
    assert issubclass(TruncatedVarint, VarintError) and issubclass(OverlongVarint, VarintError)
    with pytest.raises(ValueError):
        decode_uvarint(b"\x80")
