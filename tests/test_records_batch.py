"""Record batch v2: encode/decode round trips, CRC, stamping, and bad input."""

import struct
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hpbroker.kernels import layout
from hpbroker.records import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    CorruptRecordError,
    Header,
    InvalidCrcError,
    Record,
    TruncatedRecordError,
    compute_crc,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from hpbroker.records.batch import MAGIC_V2

CODECS = [layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

nullable_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.builds(Header, st.binary(max_size=10), nullable_bytes), max_size=3)
# Timestamps near "now" and odd ones (-1 = none, 0); deltas then fit a varlong.
timestamps = st.integers(-1, 1 << 45)


@st.composite
def record_lists(draw, min_size=0):
    """(base_offset, records) with strictly increasing absolute offsets."""
    base_offset = draw(st.integers(0, 1 << 62))
    gaps = draw(st.lists(st.integers(0, 5), min_size=min_size, max_size=8))
    records = []
    offset = base_offset - 1
    for gap in gaps:
        offset += 1 + gap  # compaction leaves gaps in offset deltas
        records.append(Record(offset, draw(timestamps), draw(nullable_bytes), draw(nullable_bytes),
                              tuple(draw(headers)), draw(st.integers(0, 255))))
    return base_offset, records


def sample_records(n=3, base_offset=0, timestamp=1_700_000_000_000):
    return [Record(base_offset + i, timestamp + i, b"k%d" % i, b"value-%d" % i * 3, (Header(b"h", b"v"),))
            for i in range(n)]


# --- round trips ------------------------------------------------------------------

@FAST
@given(record_lists(), st.sampled_from(CODECS), st.integers(-1, (1 << 31) - 1),
       st.integers(-1, (1 << 63) - 1), st.integers(-1, (1 << 15) - 1), st.integers(-1, (1 << 31) - 1),
       st.booleans())
def test_round_trip(base_and_records, codec, leader_epoch, producer_id, producer_epoch, base_sequence,
                    transactional):
    base_offset, records = base_and_records
    data = encode_batch(records, base_offset=base_offset, compression=codec, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence, transactional=transactional,
                        partition_leader_epoch=leader_epoch)
    batch = decode_batch(data)
    assert list(batch.records) == records
    h = batch.header
    assert h.size == len(data)
    assert (h.base_offset, h.magic, h.partition_leader_epoch) == (base_offset, MAGIC_V2, leader_epoch)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (producer_id, producer_epoch, base_sequence)
    assert h.compression == codec
    assert h.is_transactional == transactional
    assert not h.is_control and not h.has_delete_horizon
    assert h.timestamp_type == TIMESTAMP_CREATE_TIME
    assert h.record_count == len(records)
    if records:
        assert h.last_offset == records[-1].offset
        assert h.base_timestamp == records[0].timestamp  # producers' convention
        assert h.max_timestamp == max(r.timestamp for r in records)
    else:
        assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (0, -1, -1)
    # Decoding from a position inside a larger buffer gives the same batch.
    assert decode_batch(b"\xee" * 7 + data + b"\xee" * 3, 7) == batch


@FAST
@given(record_lists(min_size=1), st.sampled_from(CODECS))
def test_crc_is_crc32c_of_attributes_to_end(base_and_records, codec):
    base_offset, records = base_and_records
    data = encode_batch(records, base_offset=base_offset, compression=codec)
    (stored,) = struct.unpack_from(">I", data, 17)
    assert stored == crc32c.crc32c(data[21:]) == compute_crc(data)
    assert read_header(data).crc == stored


@pytest.mark.parametrize("codec", CODECS)
def test_control_and_transactional_attributes(codec):
    records = sample_records(1)
    data = encode_batch(records, compression=codec, transactional=True, control=True, producer_id=7,
                        producer_epoch=2)
    header = decode_batch(data).header
    assert header.attributes == codec | layout.TRANSACTIONAL_BIT | layout.CONTROL_BIT
    assert header.is_control and header.is_transactional


def test_log_append_time_replaces_record_timestamps():
    # Consumers read maxTimestamp as every record's timestamp in a
    # LogAppendTime batch, whatever the records carry.
    records = sample_records(3)
    data = encode_batch(records, timestamp_type=TIMESTAMP_LOG_APPEND_TIME)
    batch = decode_batch(data)
    assert batch.header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [records[-1].timestamp] * 3
    assert [r.value for r in batch] == [r.value for r in records]


def test_delete_horizon_is_stored_as_base_timestamp():
    records = sample_records(2)
    data = encode_batch(records, delete_horizon_ms=1_800_000_000_000)
    batch = decode_batch(data)
    assert batch.header.has_delete_horizon
    assert batch.header.base_timestamp == 1_800_000_000_000
    assert list(batch) == records  # record timestamps are still absolute


def test_explicit_base_timestamp():
    records = sample_records(2, timestamp=5_000)
    batch = decode_batch(encode_batch(records, base_timestamp=4_000))
    assert batch.header.base_timestamp == 4_000
    assert list(batch) == records


def test_empty_batch():
    batch = decode_batch(encode_batch([], base_offset=10))
    assert len(batch) == 0
    assert batch.header.size == layout.BATCH_HEADER_SIZE
    assert batch.header.next_offset == 11


def test_header_properties():
    data = encode_batch(sample_records(4, base_offset=100), base_offset=100, producer_id=1, producer_epoch=0,
                        base_sequence=(1 << 31) - 2)
    h = read_header(data)
    assert (h.last_offset, h.next_offset, h.size) == (103, 104, len(data))
    # Sequences wrap past int32 max like Kafka's: (2^31 - 2) + 3 -> 1.
    assert h.last_sequence == 1
    assert read_header(encode_batch(sample_records(2))).last_sequence == layout.NO_SEQUENCE


def test_records_keep_list_headers_comparable():
    # A list of headers is normalised to a tuple so equal records compare equal.
    as_list: Any = [Header(b"a", None)]  # not the annotated tuple, on purpose
    assert Record(0, 0, None, None, as_list) == Record(0, 0, None, None, (Header(b"a", None),))


@FAST
@given(st.lists(record_lists(), min_size=1, max_size=4), st.sampled_from(CODECS))
def test_iter_batches_walks_back_to_back_batches(batches, codec):
    encoded = [encode_batch(records, base_offset=base, compression=codec) for base, records in batches]
    decoded = list(iter_batches(b"".join(encoded)))
    assert [list(b) for b in decoded] == [records for _, records in batches]


# --- stamping in place ----------------------------------------------------------

@FAST
@given(record_lists(min_size=1), st.sampled_from(CODECS), st.integers(0, 1 << 62), st.integers(0, (1 << 31) - 1))
def test_stamping_base_offset_and_epoch_keeps_crc_valid(base_and_records, codec, new_base, epoch):
    base_offset, records = base_and_records
    data = bytearray(encode_batch(records, base_offset=base_offset, compression=codec))
    crc_before = read_header(data).crc
    set_base_offset(data, 0, new_base)
    set_partition_leader_epoch(data, 0, epoch)
    batch = decode_batch(data)  # verifies the CRC
    assert batch.header.crc == crc_before == compute_crc(data)
    assert batch.header.partition_leader_epoch == epoch
    shift = new_base - base_offset
    assert [r.offset for r in batch] == [r.offset + shift for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_set_log_append_time_recomputes_crc(codec):
    records = sample_records(3)
    data = bytearray(b"\x00" * 5 + encode_batch(records, compression=codec))
    set_log_append_time(data, 5, 1_900_000_000_000)
    batch = decode_batch(data, 5)
    assert batch.header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert batch.header.compression == codec  # the codec bits survive
    assert batch.header.max_timestamp == 1_900_000_000_000
    assert batch.header.base_timestamp == records[0].timestamp  # as the producer wrote it
    assert {r.timestamp for r in batch} == {1_900_000_000_000}


# --- bad input -------------------------------------------------------------------

@FAST
@given(record_lists(min_size=1), st.sampled_from(CODECS), st.data())
def test_flipped_byte_in_crc_range_raises_invalid_crc(base_and_records, codec, data):
    base_offset, records = base_and_records
    buf = bytearray(encode_batch(records, base_offset=base_offset, compression=codec))
    pos = data.draw(st.integers(layout.CRC_START, len(buf) - 1))
    buf[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(InvalidCrcError) as info:
        decode_batch(buf)
    assert info.value.stored == read_header(buf).crc
    assert info.value.computed == crc32c.crc32c(bytes(buf[21:]))


@FAST
@given(record_lists(min_size=1), st.sampled_from(CODECS), st.data())
def test_truncated_batch_raises_truncated(base_and_records, codec, data):
    base_offset, records = base_and_records
    buf = encode_batch(records, base_offset=base_offset, compression=codec)
    cut = data.draw(st.integers(0, len(buf) - 1))
    with pytest.raises(TruncatedRecordError):
        decode_batch(buf[:cut])
    if cut:  # a whole batch followed by a torn one
        with pytest.raises(TruncatedRecordError):
            list(iter_batches(buf + buf[:cut]))
    # A fetch response may end in a partial batch, which readers skip.
    assert len(list(iter_batches(buf + buf[:cut], allow_partial_tail=True))) == 1


@settings(max_examples=150, deadline=None)
@given(record_lists(min_size=1), st.sampled_from(CODECS), st.data())
def test_garbled_bytes_raise_only_corrupt_record_error(base_and_records, codec, data):
    # With the CRC check off, whatever the bytes say must end in a decoded
    # batch or a CorruptRecordError, never IndexError/struct.error/a codec's own.
    base_offset, records = base_and_records
    buf = bytearray(encode_batch(records, base_offset=base_offset, compression=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        decode_batch(bytes(buf[:cut]), verify_crc=False)
    except CorruptRecordError:
        pass


def _restamp_crc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, layout.CRC, crc32c.crc32c(bytes(buf[layout.CRC_START:])))
    return buf


@pytest.mark.parametrize("count", [0, 2, 4, -1])
def test_record_count_that_lies_is_corrupt_not_truncated(count):
    # The batch is whole and its CRC right, so a wrong count is corruption.
    buf = bytearray(encode_batch(sample_records(3)))
    struct.pack_into(">i", buf, layout.RECORD_COUNT, count)
    with pytest.raises(CorruptRecordError) as info:
        decode_batch(_restamp_crc(buf))
    assert not isinstance(info.value, TruncatedRecordError)


def test_wrong_magic_is_corrupt():
    buf = bytearray(encode_batch(sample_records(1)))
    buf[layout.MAGIC] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        read_header(buf)


def test_batch_length_below_header_is_corrupt():
    buf = bytearray(encode_batch(sample_records(1)))
    struct.pack_into(">i", buf, layout.BATCH_LENGTH, 48)
    with pytest.raises(CorruptRecordError) as info:
        decode_batch(buf)
    assert not isinstance(info.value, TruncatedRecordError)


def test_unknown_codec_in_attributes_is_corrupt():
    buf = bytearray(encode_batch(sample_records(1)))
    struct.pack_into(">h", buf, layout.ATTRIBUTES, 5)
    with pytest.raises(CorruptRecordError, match="codec"):
        decode_batch(_restamp_crc(buf))


def test_verify_crc_false_skips_the_check():
    buf = bytearray(encode_batch(sample_records(1)))
    buf[layout.CRC] ^= 0xFF
    assert list(decode_batch(buf, verify_crc=False)) == sample_records(1)


# --- what encode refuses ---------------------------------------------------------

@pytest.mark.parametrize("offsets", [[1, 1], [2, 1], [-1]])
def test_encode_rejects_offsets_not_increasing_from_base(offsets):
    records = [Record(o, 0, None, b"v") for o in offsets]
    with pytest.raises(ValueError):
        encode_batch(records, base_offset=0)


@pytest.mark.parametrize("kwargs", [
    {"timestamp_type": 2},
    {"compression": 8},
    {"producer_epoch": 1 << 15},
    {"partition_leader_epoch": 1 << 31},
])
def test_encode_rejects_out_of_range_arguments(kwargs):
    with pytest.raises(ValueError):
        encode_batch(sample_records(1), **kwargs)


def test_encode_rejects_offset_delta_beyond_int32():
    with pytest.raises(ValueError):
        encode_batch([Record(1 << 31, 0, None, None)], base_offset=0)


def test_encode_rejects_null_header_key():
    no_key: Any = None  # the wrong type on purpose: the encoder must refuse it
    with pytest.raises(ValueError):
        encode_batch([Record(0, 0, None, None, (Header(no_key, b"v"),))])


# --- agreement with another implementation ----------------------------------------

kafka_records = pytest.importorskip("kafka.record.default_records")


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_what_we_write(codec):
    records = sample_records(3, base_offset=50)
    data = encode_batch(records, base_offset=50, compression=codec, producer_id=9, producer_epoch=1,
                        base_sequence=4)
    theirs = kafka_records.DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.producer_id, theirs.base_sequence) == (50, 9, 4)
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in theirs]
    assert got == [(r.offset, r.timestamp, r.key, r.value, [("h", b"v")]) for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_what_kafka_python_writes(codec):
    builder = kafka_records.DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                      batch_size=1 << 20)
    # Values compressible enough that kafka-python keeps the codec (it falls
    # back to none when compressing does not pay).
    values = [b"v%d" % i * 100 for i in range(3)]
    for i in range(3):
        builder.append(i, timestamp=1_000 + i, key=None if i == 1 else b"k", value=values[i],
                       headers=[("h", b"x")] if i == 0 else [])
    batch = decode_batch(bytes(builder.build()))
    assert batch.header.compression == codec
    assert list(batch) == [
        Record(0, 1_000, b"k", values[0], (Header(b"h", b"x"),)),
        Record(1, 1_001, None, values[1]),
        Record(2, 1_002, b"k", values[2]),
    ]
