"""Legacy message sets (magic 0 and 1), plain and in compressed wrappers.

Messages are built here by hand from the documented layout, so the reader is
checked against the format rather than against its own writer; the writer is
then checked by round trips.
"""

import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.kernels import layout
from hpbroker.records import (
    CorruptRecordError,
    InvalidCrcError,
    LegacyRecord,
    Record,
    TruncatedRecordError,
    compress,
    decode_message_set,
    encode_message_set,
)
from hpbroker.records.compression import lz4_descriptor_end, lz4_header_checksum
from hpbroker.records.legacy import encode_message

CODECS = [layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD]


def message(offset, key, value, *, magic, timestamp=None, attributes=0, crc=None):
    """One message by the book: offset, size, CRC-32 of [magic, end), body."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for data in (key, value):
        body += struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data
    if crc is None:
        crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def legacy(offset, timestamp, key, value, magic, attributes=0):
    return LegacyRecord(offset, timestamp, key, value, (), attributes, magic)


# --- uncompressed ---------------------------------------------------------------------

def test_magic0_message_set():
    data = message(5, b"k", b"v", magic=0) + message(6, None, b"", magic=0) + message(9, b"", None, magic=0)
    assert decode_message_set(data) == [
        legacy(5, -1, b"k", b"v", 0),  # magic 0 has no timestamp
        legacy(6, -1, None, b"", 0),
        legacy(9, -1, b"", None, 0),
    ]


def test_magic1_message_set_with_timestamps():
    data = message(0, b"a", b"1", magic=1, timestamp=1_500_000_000_000) + message(
        1, None, b"2", magic=1, timestamp=1_500_000_000_007)
    assert decode_message_set(data) == [
        legacy(0, 1_500_000_000_000, b"a", b"1", 1),
        legacy(1, 1_500_000_000_007, None, b"2", 1),
    ]


def test_legacy_records_are_records():
    # Storage and the fetch path treat legacy and v2 records alike.
    (record,) = decode_message_set(message(3, b"k", b"v", magic=1, timestamp=7))
    assert isinstance(record, Record)
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == (3, 7, b"k", b"v", ())
    assert record.magic == 1


def test_starting_position():
    data = message(0, b"a", b"1", magic=0) + message(1, b"b", b"2", magic=0)
    assert [r.key for r in decode_message_set(b"\xff" * 3 + data, 3)] == [b"a", b"b"]


# --- compressed wrappers ---------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_magic1_wrapper_relative_offsets(codec):
    # The producer numbers inner messages 0..n-1; the broker gives the
    # wrapper the absolute offset of the last one (here 1002).
    inner = b"".join(message(i, b"k%d" % i, b"v%d" % i, magic=1, timestamp=100 + i) for i in range(3))
    wrapper = message(1002, None, compress(codec, inner), magic=1, timestamp=102, attributes=codec)
    assert decode_message_set(wrapper) == [legacy(1000 + i, 100 + i, b"k%d" % i, b"v%d" % i, 1) for i in range(3)]


@pytest.mark.parametrize("codec", [layout.CODEC_GZIP, layout.CODEC_SNAPPY])
def test_magic0_wrapper_absolute_offsets(codec):
    inner = b"".join(message(500 + i, None, b"v%d" % i, magic=0) for i in range(3))
    wrapper = message(502, None, compress(codec, inner), magic=0, attributes=codec)
    assert decode_message_set(wrapper) == [legacy(500 + i, -1, None, b"v%d" % i, 0) for i in range(3)]


def test_magic1_log_append_time_wrapper_gives_its_timestamp():
    inner = b"".join(message(i, None, b"v", magic=1, timestamp=100 + i) for i in range(2))
    attributes = layout.CODEC_GZIP | layout.LEGACY_TIMESTAMP_TYPE_BIT
    wrapper = message(11, None, compress(layout.CODEC_GZIP, inner), magic=1, timestamp=9_999, attributes=attributes)
    assert [(r.offset, r.timestamp) for r in decode_message_set(wrapper)] == [(10, 9_999), (11, 9_999)]


def test_wrappers_and_plain_messages_back_to_back():
    wrapped = b"".join(message(i, None, b"w%d" % i, magic=1, timestamp=0) for i in range(2))
    data = (message(0, None, b"p0", magic=1, timestamp=0)
            + message(2, None, compress(layout.CODEC_SNAPPY, wrapped), magic=1, timestamp=0,
                      attributes=layout.CODEC_SNAPPY)
            + message(3, None, b"p3", magic=1, timestamp=0))
    assert [(r.offset, r.value) for r in decode_message_set(data)] == [
        (0, b"p0"), (1, b"w0"), (2, b"w1"), (3, b"p3")]


def test_magic0_lz4_with_kafka3160_header_checksum():
    # Kafka 0.8-0.10 hashed the frame magic into the LZ4 header checksum.
    inner = message(7, None, b"lz4 value", magic=0)
    frame = bytearray(lz4.frame.compress(inner, store_size=False))
    hc = lz4_descriptor_end(frame)
    frame[hc] = lz4_header_checksum(frame, kafka3160=True)
    assert frame[hc] != lz4_header_checksum(frame)  # really the wrong one for this frame
    wrapper = message(7, None, bytes(frame), magic=0, attributes=layout.CODEC_LZ4)
    assert decode_message_set(wrapper) == [legacy(7, -1, None, b"lz4 value", 0)]


def test_magic0_lz4_with_correct_header_checksum_is_read_too():
    inner = message(7, None, b"lz4 value", magic=0)
    wrapper = message(7, None, lz4.frame.compress(inner), magic=0, attributes=layout.CODEC_LZ4)
    assert decode_message_set(wrapper) == [legacy(7, -1, None, b"lz4 value", 0)]


# --- CRC and bad input ----------------------------------------------------------------------

def test_crc32_is_checked():
    good = message(0, b"k", b"v", magic=1, timestamp=0)
    assert struct.unpack_from(">I", good, 12)[0] == zlib.crc32(good[16:])
    bad = message(0, b"k", b"v", magic=1, timestamp=0, crc=zlib.crc32(good[16:]) ^ 1)
    with pytest.raises(InvalidCrcError) as info:
        decode_message_set(bad)
    assert info.value.computed == zlib.crc32(good[16:])
    assert [r.value for r in decode_message_set(bad, verify_crc=False)] == [b"v"]


@pytest.mark.parametrize("flip", range(16, 31))
def test_flipped_byte_fails_crc(flip):
    data = bytearray(message(0, b"k", b"v", magic=1, timestamp=0))
    data[flip] ^= 0x40
    with pytest.raises(CorruptRecordError):
        decode_message_set(data)


def test_inner_crc_is_checked():
    inner = message(0, None, b"v", magic=1, timestamp=0, crc=0)
    wrapper = message(0, None, compress(layout.CODEC_GZIP, inner), magic=1, timestamp=0,
                      attributes=layout.CODEC_GZIP)
    with pytest.raises(InvalidCrcError):
        decode_message_set(wrapper)


@pytest.mark.parametrize("magic", [0, 1])
def test_truncated_message_set(magic):
    first = message(0, b"k", b"v", magic=magic, timestamp=0)
    data = first + message(1, b"key", b"value", magic=magic, timestamp=0)
    for cut in range(len(data)):
        if cut in (0, len(first)):  # ends exactly after a message: nothing is torn
            continue
        with pytest.raises(TruncatedRecordError):
            decode_message_set(data[:cut])
        # A fetch may end in a partial message; readers stop before it.
        assert len(decode_message_set(data[:cut], allow_partial_tail=True)) == (1 if cut > len(first) else 0)


def test_size_below_minimum_is_corrupt():
    data = bytearray(message(0, None, None, magic=1, timestamp=0))
    struct.pack_into(">i", data, 8, layout.LEGACY_V1_MIN_SIZE - layout.LOG_OVERHEAD - 1)
    with pytest.raises(CorruptRecordError) as info:
        decode_message_set(data, verify_crc=False)
    assert not isinstance(info.value, TruncatedRecordError)


def test_magic2_is_not_a_legacy_message():
    data = bytearray(message(0, None, b"v", magic=1, timestamp=0))
    data[16] = 2
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_message_set(data, verify_crc=False)


@pytest.mark.parametrize("key_length", [100, -2])
def test_key_length_that_does_not_fit_is_corrupt(key_length):
    data = bytearray(message(0, b"k", b"v", magic=0))
    struct.pack_into(">i", data, layout.LEGACY_V0_KEY, key_length)
    with pytest.raises(CorruptRecordError):
        decode_message_set(data, verify_crc=False)


def test_trailing_bytes_inside_a_message_are_corrupt():
    data = bytearray(message(0, b"k", b"v", magic=0) + b"\x00")
    struct.pack_into(">i", data, 8, struct.unpack_from(">i", data, 8)[0] + 1)
    with pytest.raises(CorruptRecordError, match="after its value"):
        decode_message_set(data, verify_crc=False)


def test_nested_compression_is_corrupt():
    innermost = compress(layout.CODEC_GZIP, message(0, None, b"v", magic=1, timestamp=0))
    inner = message(0, None, innermost, magic=1, timestamp=0, attributes=layout.CODEC_GZIP)
    wrapper = message(0, None, compress(layout.CODEC_GZIP, inner), magic=1, timestamp=0,
                      attributes=layout.CODEC_GZIP)
    with pytest.raises(CorruptRecordError, match="nests"):
        decode_message_set(wrapper)


def test_wrapper_with_null_value_is_corrupt():
    with pytest.raises(CorruptRecordError, match="null value"):
        decode_message_set(message(0, None, None, magic=1, timestamp=0, attributes=layout.CODEC_GZIP))


def test_truncated_inner_message_is_corrupt_not_truncated():
    # The wrapper is whole, so a short inner set is bad data, not a torn tail.
    inner = message(0, None, b"value", magic=1, timestamp=0)[:-2]
    wrapper = message(0, None, compress(layout.CODEC_GZIP, inner), magic=1, timestamp=0,
                      attributes=layout.CODEC_GZIP)
    with pytest.raises(CorruptRecordError) as info:
        decode_message_set(wrapper)
    assert not isinstance(info.value, TruncatedRecordError)


# --- the writer ------------------------------------------------------------------------------

def test_encode_message_matches_the_book():
    assert encode_message(4, b"k", None, magic=1, timestamp=77, attributes=2) == message(
        4, b"k", None, magic=1, timestamp=77, attributes=2)
    assert encode_message(4, None, b"v", magic=0) == message(4, None, b"v", magic=0)


@st.composite
def legacy_records(draw):
    first = draw(st.integers(0, 1 << 40))
    n = draw(st.integers(1, 6))
    offsets = [first + i for i in range(n)]  # old producers never left gaps
    maybe = st.none() | st.binary(max_size=30)
    return [Record(o, draw(st.integers(0, 1 << 42)), draw(maybe), draw(maybe)) for o in offsets]


@settings(max_examples=40, deadline=None)
@given(legacy_records(), st.sampled_from([0, 1]), st.sampled_from([layout.CODEC_NONE, *CODECS]))
def test_encode_decode_round_trip(records, magic, codec):
    data = encode_message_set(records, magic=magic, compression=codec)
    decoded = decode_message_set(data)
    assert [(r.offset, r.key, r.value, r.magic) for r in decoded] == [(r.offset, r.key, r.value, magic)
                                                                      for r in records]
    expected_ts = [r.timestamp for r in records] if magic == 1 else [layout.NO_TIMESTAMP] * len(records)
    assert [r.timestamp for r in decoded] == expected_ts


def test_encode_log_append_time():
    records = [Record(i, 100 + i, None, b"v") for i in range(3)]
    data = encode_message_set(records, magic=1, compression=layout.CODEC_GZIP, log_append_time=5_000)
    assert [r.timestamp for r in decode_message_set(data)] == [5_000] * 3


def test_encode_magic0_lz4_writes_the_kafka3160_checksum():
    data = encode_message_set([Record(0, 0, None, b"v")], magic=0, compression=layout.CODEC_LZ4)
    frame = data[layout.LEGACY_V0_KEY + 8:]  # null key, value length, then the frame
    assert frame[lz4_descriptor_end(frame)] == lz4_header_checksum(frame, kafka3160=True)
    assert [r.value for r in decode_message_set(data)] == [b"v"]


def test_encode_rejects_bad_arguments():
    with pytest.raises(ValueError):
        encode_message(0, None, None, magic=2)
    with pytest.raises(ValueError):
        encode_message_set([], magic=1, compression=layout.CODEC_GZIP)


# --- what kafka-python's legacy producer writes ------------------------------------------------

@pytest.mark.parametrize("magic, codec", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)])
def test_reads_kafka_python_legacy_batches(magic, codec):
    legacy_records_mod = pytest.importorskip("kafka.record.legacy_records")
    builder = legacy_records_mod.LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1_000 + i, key=b"k%d" % i, value=b"value %d" % i * 20)
    data = bytearray(builder.build())
    if codec:
        # kafka-python leaves the wrapper at offset 0; a broker stamps the
        # absolute offset of the last inner message (outside the CRC).
        struct.pack_into(">q", data, 0, 2 if magic == 0 else 102)
    first = 0 if (magic == 0 or not codec) else 100
    decoded = decode_message_set(data)
    assert [(r.offset, r.key, r.value) for r in decoded] == [
        (first + i, b"k%d" % i, b"value %d" % i * 20) for i in range(3)]
    if magic == 1:
        assert [r.timestamp for r in decoded] == [1_000, 1_001, 1_002]
