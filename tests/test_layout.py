"""Pins the byte layouts of hpbroker/kernels/layout.py to Kafka's formats.

The kernels and the codec both read offsets from ``layout``; if a field size
there were wrong, everything downstream would agree with itself and disagree
with every Kafka client, so the totals are pinned to Kafka's numbers here.
"""

import struct

from hpbroker.kernels import layout
from hpbroker.records import batch, legacy

# (layout constant, struct code) in wire order for a v2 batch header, as in
# Kafka's DefaultRecordBatch.
V2_FIELDS = [
    ("BASE_OFFSET", "q"),
    ("BATCH_LENGTH", "i"),
    ("PARTITION_LEADER_EPOCH", "i"),
    ("MAGIC", "b"),
    ("CRC", "I"),
    ("ATTRIBUTES", "h"),
    ("LAST_OFFSET_DELTA", "i"),
    ("BASE_TIMESTAMP", "q"),
    ("MAX_TIMESTAMP", "q"),
    ("PRODUCER_ID", "q"),
    ("PRODUCER_EPOCH", "h"),
    ("BASE_SEQUENCE", "i"),
    ("RECORD_COUNT", "i"),
]


def test_v2_header_constants_match_kafka():
    assert layout.BATCH_HEADER_SIZE == 61
    assert layout.RECORDS == 61
    assert layout.LOG_OVERHEAD == 12
    assert layout.MAGIC == 16
    assert layout.CRC == 17
    assert layout.CRC_START == layout.ATTRIBUTES == 21
    assert layout.MAGIC_PROBE_SIZE == 17
    # Kafka's absolute offsets of the remaining fields.
    assert [layout.LAST_OFFSET_DELTA, layout.BASE_TIMESTAMP, layout.MAX_TIMESTAMP, layout.PRODUCER_ID,
            layout.PRODUCER_EPOCH, layout.BASE_SEQUENCE, layout.RECORD_COUNT] == [23, 27, 35, 43, 51, 53, 57]


def test_v2_offsets_are_contiguous():
    # Each field starts where the previous one ends: no gaps, no overlaps.
    pos = 0
    for name, code in V2_FIELDS:
        assert getattr(layout, name) == pos, name
        pos += struct.calcsize(">" + code)
    assert pos == layout.BATCH_HEADER_SIZE


def test_batch_struct_matches_layout():
    fmt = batch._HEADER.format
    assert fmt[0] == ">"
    codes = fmt[1:]
    assert len(codes) == len(V2_FIELDS) == len(batch.BatchHeader._fields)
    for i, ((name, code), field) in enumerate(zip(V2_FIELDS, batch.BatchHeader._fields)):
        # The offset of field i in the struct is the size of the fields before it.
        assert struct.calcsize(">" + codes[:i]) == getattr(layout, name), name
        assert codes[i] == code, name
        assert field == name.lower(), "BatchHeader field order must follow the wire"
    assert batch._HEADER.size == layout.BATCH_HEADER_SIZE


def test_crc_covered_struct_is_the_header_tail():
    # The CRC-covered part of the header runs from attributes to recordCount.
    assert batch._CRC_COVERED.size == layout.BATCH_HEADER_SIZE - layout.CRC_START
    assert batch._HEADER.format.endswith(batch._CRC_COVERED.format[1:])


def test_attribute_bits():
    assert layout.COMPRESSION_MASK == 0x07
    assert layout.TIMESTAMP_TYPE_BIT == 0x08
    assert layout.TRANSACTIONAL_BIT == 0x10
    assert layout.CONTROL_BIT == 0x20
    assert layout.DELETE_HORIZON_BIT == 0x40
    assert layout.CODEC_NAMES == ("none", "gzip", "snappy", "lz4", "zstd")
    assert [layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD] == [
        0, 1, 2, 3, 4]


def test_legacy_offsets():
    assert layout.LEGACY_CRC == 12
    assert layout.LEGACY_CRC_START == layout.LEGACY_MAGIC == 16
    assert layout.LEGACY_ATTRIBUTES == 17
    assert layout.LEGACY_TIMESTAMP == 18
    assert layout.LEGACY_V0_KEY == 18
    assert layout.LEGACY_V1_KEY == 26
    # Header plus two null lengths: Kafka's MessageV0/V1 minimum sizes
    # (Kafka's RECORD_OVERHEAD_V0 = 14 and V1 = 22, plus LOG_OVERHEAD).
    assert layout.LEGACY_V0_MIN_SIZE == 26
    assert layout.LEGACY_V1_MIN_SIZE == 34


def test_legacy_prefix_struct_matches_layout():
    # offset, messageSize, crc, magic, attributes
    codes = legacy._PREFIX.format[1:]
    assert struct.calcsize(">" + codes[:2]) == layout.LEGACY_CRC
    assert struct.calcsize(">" + codes[:3]) == layout.LEGACY_MAGIC
    assert struct.calcsize(">" + codes[:4]) == layout.LEGACY_ATTRIBUTES
    assert legacy._PREFIX.size == layout.LEGACY_TIMESTAMP


def test_magic_sits_at_the_same_place_in_both_formats():
    # A reader probes byte 16 to tell a v2 batch from a legacy message.
    assert layout.MAGIC == layout.LEGACY_MAGIC
    assert layout.MAGIC_PROBE_SIZE == layout.LEGACY_MAGIC + 1
