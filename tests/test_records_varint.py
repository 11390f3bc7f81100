"""Zig-zag varints of the record format (protobuf encoding, Kafka's ByteUtils),
and the record errors their bad bytes raise."""

import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.records import varint
from hpbroker.records.errors import CorruptRecordError, TruncatedRecordError
from hpbroker.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    unzigzag,
    zigzag,
)
from hpbroker.varint import max_bytes

INT32 = st.integers(varint.INT32_MIN, varint.INT32_MAX)
INT64 = st.integers(varint.INT64_MIN, varint.INT64_MAX)


@pytest.mark.parametrize("value, encoded", [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (300, b"\xd8\x04"),  # zig-zag 600 = 0b100_1011000
    (-300, b"\xd7\x04"),
    (varint.INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
    (varint.INT32_MIN, b"\xff\xff\xff\xff\x0f"),
])
def test_known_varint_encodings(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))
    # Both encoders agree wherever an int32 fits.
    assert encode_varlong(value) == encoded


def test_known_varlong_extremes():
    assert encode_varlong(varint.INT64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varlong(varint.INT64_MIN) == b"\xff" * 9 + b"\x01"
    assert decode_varlong(b"\xff" * 9 + b"\x01") == (varint.INT64_MIN, 10)


@settings(max_examples=300)
@given(INT32)
def test_varint_round_trip(value):
    data = encode_varint(value)
    assert len(data) <= max_bytes(32) == 5
    assert len(data) == size_of_varint(value)
    assert decode_varint(data) == (value, len(data))


@settings(max_examples=300)
@given(INT64)
def test_varlong_round_trip(value):
    data = encode_varlong(value)
    assert len(data) <= max_bytes(64) == 10
    assert len(data) == size_of_varint(value)
    assert decode_varlong(data) == (value, len(data))


@settings(max_examples=200)
@given(INT64)
def test_zigzag_is_a_bijection_onto_small_naturals(value):
    raw = zigzag(value)
    assert 0 <= raw <= 0xFFFFFFFFFFFFFFFF
    assert unzigzag(raw) == value
    # Small magnitudes map to small codes: |v| <= raw <= 2|v|.
    assert abs(value) <= raw <= 2 * abs(value)


@settings(max_examples=100)
@given(st.lists(INT64, max_size=8), st.binary(max_size=4))
def test_decoders_walk_a_buffer_by_position(values, prefix):
    # Decoders take (buf, pos) and return the position after, so a caller can
    # read consecutive values without slicing (here from a memoryview).
    buf = memoryview(prefix + b"".join(encode_varlong(v) for v in values))
    pos = len(prefix)
    out = []
    for _ in values:
        value, pos = decode_varlong(buf, pos)
        out.append(value)
    assert out == values
    assert pos == len(buf)


@pytest.mark.parametrize("encode", [encode_varint, encode_varlong])
def test_encoders_reject_out_of_range(encode):
    limit = 31 if encode is encode_varint else 63
    with pytest.raises(ValueError):
        encode(1 << limit)
    with pytest.raises(ValueError):
        encode(-(1 << limit) - 1)


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_input_raises_truncated(decode, data):
    with pytest.raises(TruncatedRecordError):
        decode(data)


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong])
def test_truncated_at_a_position_past_the_end(decode):
    with pytest.raises(TruncatedRecordError):
        decode(b"\x00\x00", 2)


@pytest.mark.parametrize("decode, limit", [(decode_varint, 5), (decode_varlong, 10)])
def test_overlong_input_raises_corrupt(decode, limit):
    # A continuation bit on the last allowed byte: not a torn tail but bad data,
    # even when more bytes follow.
    data = b"\x80" * limit + b"\x00"
    with pytest.raises(CorruptRecordError) as info:
        decode(data)
    assert not isinstance(info.value, TruncatedRecordError)


@pytest.mark.parametrize("decode, data", [
    (decode_varint, b"\xff\xff\xff\xff\x1f"),  # 35 bits, beyond int32's zig-zag range
    (decode_varlong, b"\xff" * 9 + b"\x03"),  # 65 bits
])
def test_value_too_wide_raises_corrupt(decode, data):
    with pytest.raises(CorruptRecordError):
        decode(data)


def test_corrupt_errors_are_value_errors():
    # Callers that only care about "bad input" catch ValueError.
    with pytest.raises(ValueError):
        decode_varint(b"\x80")


def test_errors_name_the_field_and_where_it_starts():
    with pytest.raises(TruncatedRecordError, match=r"^varlong at byte 1 is cut off after 2 byte\(s\)$"):
        decode_varlong(b"\x00\x80\x80", 1)
    with pytest.raises(CorruptRecordError, match=r"^varint at byte 0 is longer than 5 bytes$"):
        decode_varint(b"\x80" * 6)
    with pytest.raises(CorruptRecordError, match=r"^varint at byte 2 does not fit in 32 bits$"):
        decode_varint(b"\x00\x00\xff\xff\xff\xff\x1f", 2)
