"""Recompressing a v2 batch into another codec: every codec into every codec,
from real producers' batches (librdkafka's raw snappy and kafka-python's
xerial-framed snappy among them) and from batches carrying every header
field; the records and the header survive, the CRC is valid."""

import pytest

from hpbroker.kernels import layout
from hpbroker.records import (
    CorruptRecordError,
    Header,
    InvalidCrcError,
    Record,
    decode_batch,
    encode_batch,
    encode_control_batch,
    read_header,
)
from hpbroker.records.batch import compute_crc
from hpbroker.records.compression import XERIAL_MAGIC, compress, decompress
from hpbroker.records.recompress import needs_recompression, recompress, recompress_batches
from tests.test_golden import GOLDEN, STEMS

CODECS = range(len(layout.CODEC_NAMES))
# Every header field but these three is kept; attributes keep all but the codec bits.
_CHANGED = {"batch_length", "crc", "attributes"}


def _golden_batches(stem):
    data = (GOLDEN / f"{stem}.bin").read_bytes()
    pos, out = 0, []
    while pos < len(data):
        size = read_header(data, pos).size
        out.append(data[pos : pos + size])
        pos += size
    return out


def _check_same_batch(before: bytes, after: bytes, codec: int):
    old, new = decode_batch(before), decode_batch(after)  # decode_batch verifies the CRC
    assert new.header.compression == codec
    assert new.header.attributes & ~layout.COMPRESSION_MASK == old.header.attributes & ~layout.COMPRESSION_MASK
    for field in old.header._fields:
        if field not in _CHANGED:
            assert getattr(new.header, field) == getattr(old.header, field), field
    assert new.records == old.records  # offsets, timestamps, keys, values, headers, attributes


def test_the_corpus_has_both_snappy_framings():
    assert _golden_batches("kafka-python-snappy")[0][61:69] == XERIAL_MAGIC
    assert _golden_batches("confluent-snappy")[0][61:69] != XERIAL_MAGIC


@pytest.mark.parametrize("codec", CODECS, ids=layout.CODEC_NAMES)
@pytest.mark.parametrize("stem", STEMS)
def test_every_captured_batch_into_every_codec(stem, codec):
    for batch in _golden_batches(stem):
        out = recompress(batch, codec)
        if read_header(batch).compression == codec:
            assert out is batch
        else:
            _check_same_batch(batch, out, codec)
            assert recompress(out, read_header(batch).compression) == _reencoded(batch)


def _reencoded(batch: bytes) -> bytes:
    """The batch as this broker writes its own codec (librdkafka's raw snappy
    comes back xerial-framed, so a round trip is compared with this)."""
    codec = read_header(batch).compression
    return _with_records_part(batch, compress(codec, decompress(codec, batch[61:])))


def _rich_records():
    base = 1_700_000_000_000
    return [Record(offset=1000 + i, timestamp=base + (i * 37) % 11, key=None if i % 5 == 0 else b"k%d" % i,
                   value=None if i == 3 else b"value %d " % i * (1 + i % 9),
                   headers=() if i % 2 else (Header(b"h", b"x"), Header(b"empty", b""), Header(b"n", None)))
            for i in range(50)]


@pytest.mark.parametrize("target", CODECS, ids=layout.CODEC_NAMES)
@pytest.mark.parametrize("source", CODECS, ids=layout.CODEC_NAMES)
def test_producer_fields_timestamps_and_epochs_survive(source, target):
    batch = encode_batch(_rich_records(), base_offset=1000, compression=source, producer_id=4242, producer_epoch=7,
                         base_sequence=2_147_483_640, transactional=True, partition_leader_epoch=12,
                         base_timestamp=1_699_999_999_000)
    out = recompress(batch, target)
    if source == target:
        assert out is batch
    else:
        _check_same_batch(batch, out, target)
        h = read_header(out)
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (4242, 7, 2_147_483_640, True)
        assert (h.base_offset, h.partition_leader_epoch, h.base_timestamp) == (1000, 12, 1_699_999_999_000)


def test_log_append_time_and_delete_horizon_bits_are_kept():
    batch = encode_batch(_rich_records(), base_offset=1000, compression=layout.CODEC_LZ4, timestamp_type=1,
                         delete_horizon_ms=1_700_000_500_000)
    out = recompress(batch, layout.CODEC_ZSTD)
    _check_same_batch(batch, out, layout.CODEC_ZSTD)
    assert read_header(out).timestamp_type == 1 and read_header(out).has_delete_horizon


@pytest.mark.parametrize("level", [1, 19])
def test_same_codec_is_kept_whatever_the_level(level):
    batch = encode_batch(_rich_records(), base_offset=1000, compression=layout.CODEC_ZSTD)
    assert recompress(batch, layout.CODEC_ZSTD, level) is batch


def test_control_batches_are_kept():
    marker = encode_control_batch(1, producer_id=5, producer_epoch=1, coordinator_epoch=0, timestamp=1)
    assert not needs_recompression(read_header(marker).attributes, layout.CODEC_GZIP)
    assert recompress(marker, layout.CODEC_GZIP) is marker


@pytest.mark.parametrize("codec, low, high", [(layout.CODEC_GZIP, 1, 9), (layout.CODEC_ZSTD, 1, 19),
                                              (layout.CODEC_LZ4, 1, 12)])
def test_levels_are_applied(codec, low, high):
    records = [Record(offset=i, timestamp=i, key=None, value=(b"%d " % (i * 7919 % 1000)) * 40) for i in range(300)]
    batch = encode_batch(records)
    fast, small = recompress(batch, codec, low), recompress(batch, codec, high)
    assert len(small) < len(fast)
    assert decode_batch(fast).records == decode_batch(small).records == decode_batch(batch).records


def test_a_wrong_crc_is_refused_unless_the_caller_checked_it():
    batch = bytearray(encode_batch(_rich_records(), compression=layout.CODEC_LZ4))
    batch[100] ^= 0xFF
    with pytest.raises(InvalidCrcError):
        recompress(bytes(batch), layout.CODEC_ZSTD)


def _with_records_part(batch: bytes, body: bytes, count: int | None = None) -> bytes:
    """The batch with another records part (and record count), its CRC made valid."""
    out = bytearray(batch[:61]) + body
    out[8:12] = (len(out) - 12).to_bytes(4, "big")
    if count is not None:
        out[57:61] = count.to_bytes(4, "big")
    out[17:21] = compute_crc(out).to_bytes(4, "big")
    return bytes(out)


def test_records_that_do_not_decompress_are_corrupt():
    batch = encode_batch(_rich_records(), compression=layout.CODEC_GZIP)
    with pytest.raises(CorruptRecordError, match="gzip"):
        recompress(_with_records_part(batch, b"\x1f\x8b not gzip at all"), layout.CODEC_ZSTD)


@pytest.mark.parametrize("count", [49, 51])
def test_a_record_count_that_lies_is_corrupt(count):
    batch = encode_batch(_rich_records(), compression=layout.CODEC_LZ4)
    lying = _with_records_part(batch, batch[61:], count)
    with pytest.raises(CorruptRecordError, match="well-formed"):
        recompress(lying, layout.CODEC_ZSTD)


def test_a_cut_batch_is_refused():
    batch = encode_batch(_rich_records(), compression=layout.CODEC_LZ4)
    with pytest.raises(CorruptRecordError):
        recompress(batch[:-1], layout.CODEC_ZSTD)


def test_batches_back_to_back_only_the_ones_that_need_it():
    lz4 = encode_batch(_rich_records(), base_offset=0, compression=layout.CODEC_LZ4)
    zstd = encode_batch(_rich_records(), base_offset=0, compression=layout.CODEC_ZSTD)
    marker = encode_control_batch(0, producer_id=5, producer_epoch=1, coordinator_epoch=0, timestamp=1)
    pieces = [lz4, zstd, marker, lz4]
    buf = b"".join(pieces)
    positions = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces))]
    sizes = [len(p) for p in pieces]
    attributes = [read_header(p).attributes for p in pieces]
    out = recompress_batches(buf, positions, sizes, attributes, layout.CODEC_ZSTD)
    converted = recompress(lz4, layout.CODEC_ZSTD)
    assert out == converted + zstd + marker + converted
    assert recompress_batches(zstd + marker, [0, len(zstd)], [len(zstd), len(marker)],
                              [read_header(zstd).attributes, read_header(marker).attributes], layout.CODEC_ZSTD) is None
