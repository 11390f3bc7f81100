"""Transaction markers: control batches holding one COMMIT or ABORT record."""

import struct

import pytest

from hpbroker.clock import now_ms
from hpbroker.kernels import layout
from hpbroker.records import (
    ControlRecord,
    CorruptRecordError,
    Record,
    decode_batch,
    encode_control_batch,
    parse_control_record,
)
from hpbroker.records.control import ABORT, COMMIT, encode_control_record


@pytest.mark.parametrize("kind, name", [(COMMIT, "COMMIT"), (ABORT, "ABORT")])
def test_control_batch_round_trip(kind, name):
    data = encode_control_batch(kind, producer_id=4242, producer_epoch=3, coordinator_epoch=17, base_offset=900,
                                timestamp=1_700_000_000_000, partition_leader_epoch=5)
    batch = decode_batch(data)
    h = batch.header
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_offset, h.partition_leader_epoch) == (4242, 3, 900, 5)
    assert h.record_count == 1 and h.last_offset == 900
    (record,) = batch.records
    assert (record.offset, record.timestamp) == (900, 1_700_000_000_000)
    marker = parse_control_record(record)
    assert marker == ControlRecord(kind, 0, 17)
    assert marker.kind_name == name
    assert marker.is_commit == (kind == COMMIT)
    assert marker.is_abort == (kind == ABORT)


def test_marker_bytes_are_kafkas():
    # key: version int16 0, type int16 (1 = COMMIT); value: version int16 0,
    # coordinatorEpoch int32 (Kafka's EndTransactionMarker).
    record = encode_control_record(COMMIT, 17)
    assert record.key == b"\x00\x00\x00\x01"
    assert record.value == b"\x00\x00\x00\x00\x00\x11"
    assert encode_control_record(ABORT, -1).key == b"\x00\x00\x00\x00"


def test_default_timestamp_is_now():
    before = now_ms()
    data = encode_control_batch(COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0)
    after = now_ms()
    (record,) = decode_batch(data).records
    assert before <= record.timestamp <= after


def test_higher_versions_are_read_by_their_leading_fields():
    # A newer writer may append fields; readers take what they know.
    record = Record(0, 0, struct.pack(">hh", 3, COMMIT) + b"extra", struct.pack(">hi", 2, 9) + b"more")
    assert parse_control_record(record) == ControlRecord(COMMIT, 3, 9)


def test_unknown_control_type_is_reported_not_rejected():
    # Kafka has other control types (e.g. LEADER_CHANGE = 2) with other values.
    record = Record(0, 0, struct.pack(">hh", 0, 2), b"\x00")
    marker = parse_control_record(record)
    assert (marker.kind, marker.kind_name, marker.coordinator_epoch) == (2, "UNKNOWN", -1)
    assert not marker.is_commit and not marker.is_abort


@pytest.mark.parametrize("key, value", [
    (None, b"\x00" * 6),
    (b"\x00\x00\x01", b"\x00" * 6),  # key shorter than 4 bytes
    (b"\x00\x00\x00\x01", None),
    (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00"),  # value shorter than 6 bytes
])
def test_short_marker_is_corrupt(key, value):
    with pytest.raises(CorruptRecordError):
        parse_control_record(Record(0, 0, key, value))


def test_encode_rejects_unknown_type():
    with pytest.raises(ValueError):
        encode_control_record(2, 0)
    with pytest.raises(ValueError):
        encode_control_batch(5, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0)


def test_control_bits_in_attributes():
    data = encode_control_batch(ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0)
    (attributes,) = struct.unpack_from(">h", data, layout.ATTRIBUTES)
    assert attributes == layout.CONTROL_BIT | layout.TRANSACTIONAL_BIT


def test_kafka_python_sees_a_control_batch():
    default_records = pytest.importorskip("kafka.record.default_records")
    data = encode_control_batch(COMMIT, producer_id=8, producer_epoch=1, coordinator_epoch=2, timestamp=0)
    theirs = default_records.DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    assert theirs.producer_id == 8
