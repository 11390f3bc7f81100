"""Idempotent producers through ``Log.append``: retries, sequence and epoch
errors, and the producer state across close, crash, roll and retention."""

import os
import struct

import pytest

from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.storage import (
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaStorageError,
    Log,
    LogConfig,
    OutOfOrderSequenceError,
    filenames,
)
from hpbroker.storage.config import ConfigError, is_broker_log_key, is_topic_config_key
from hpbroker.storage.log import ORIGIN_COORDINATOR, now_ms
from hpbroker.storage.producer_state import decode_snapshot
from tests.log_helpers import make_batch, read_all
from tests.test_storage_log import file_size_limit

PID = 4242


def idem(seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0, ts: int | None = None, tag: str = "v") -> bytes:
    # Current timestamps: a producer is expired by its last batch's timestamp on reload.
    ts = now_ms() if ts is None else ts
    records = [Record(offset=i, timestamp=ts + i, key=None, value=f"{tag}{seq + i}".encode()) for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_log(path, **config) -> Log:
    return Log.open(str(path / "t-0"), "t", 0, LogConfig(**config))


def reopen(log: Log) -> Log:
    return Log.open(log.directory, log.topic, log.partition, log.config)


def crash(log: Log) -> None:
    """Stop without close(): no final flush, snapshot or sealing."""
    for segment in log.segments:
        segment.close()


def snapshots(log: Log) -> list[int]:
    return log.producer_state.list_snapshots()


def values(log: Log) -> list[bytes]:
    return [r.value for r in read_all(log)]


def test_a_retried_batch_is_answered_with_its_original_offsets(tmp_path):
    log = open_log(tmp_path)
    first, second = idem(0, 3), idem(3, 2)
    assert log.append(first).first_offset == 0
    log.append(make_batch(2))  # a non-idempotent producer in between
    info = log.append(second)
    assert (info.first_offset, info.last_offset) == (5, 6)
    retry = bytearray(first)
    dup = log.append(retry)
    assert (dup.first_offset, dup.last_offset, dup.batches, dup.records, dup.size) == (0, 2, 0, 0, 0)
    assert dup.log_append_time == -1
    assert retry == first, "a duplicate is not stamped"
    assert log.append(second).first_offset == 5
    assert log.log_end_offset == 7 and len(read_all(log)) == 7
    assert log.append(idem(5)).first_offset == 7


def test_a_duplicate_under_log_append_time_answers_the_stored_time(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    batch = idem(0, 2)
    info = log.append(batch, timestamp_ms=123_456)
    dup = log.append(batch, timestamp_ms=999_999)
    assert (dup.first_offset, dup.last_offset, dup.log_append_time) == (info.first_offset, info.last_offset, 123_456)


def test_a_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0, 2))
    with pytest.raises(OutOfOrderSequenceError) as err:
        log.append(idem(5))
    assert err.value.error_code == 45
    assert log.log_end_offset == 2
    assert log.append(idem(2)).first_offset == 2


def test_an_older_epoch_is_fenced(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0, epoch=1))
    with pytest.raises(InvalidProducerEpochError) as err:
        log.append(idem(1, epoch=0))
    assert err.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(3, epoch=2))  # a bumped epoch restarts at 0
    assert log.append(idem(0, epoch=2)).first_offset == 1
    assert log.log_end_offset == 2


def test_a_rejected_batch_in_a_request_rejects_all_of_it(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(0, 2) + idem(7))
    assert log.log_end_offset == 0
    assert log.append(idem(0, 2) + idem(2)).last_offset == 2  # consecutive batches in one request


def test_a_producer_id_without_a_sequence_is_invalid(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecordError) as err:
        log.append(idem(-1))
    assert err.value.error_code == 87


def test_only_the_broker_may_append_control_batches(tmp_path):
    log = open_log(tmp_path)
    marker = encode_control_batch(1, producer_id=PID, producer_epoch=0, coordinator_epoch=3)
    with pytest.raises(InvalidRecordError):
        log.append(marker)
    assert log.log_end_offset == 0
    assert log.append(marker, origin=ORIGIN_COORDINATOR).first_offset == 0
    with pytest.raises(ValueError):
        log.append(make_batch(1), origin="somebody")


def test_non_idempotent_batches_leave_no_producer_state(tmp_path):
    log = open_log(tmp_path)
    for _ in range(3):
        log.append(make_batch(2))
    assert len(log.producer_state) == 0 and log.producer_state.end_offset == 6


def test_state_survives_a_clean_close(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0, 2))
    last = idem(2, 3)
    log.append(last)
    log.close()
    assert snapshots(log) == [5]
    again = reopen(log)
    assert snapshots(again) == [5], "the .snapshot files are kept on open"
    dup = again.append(last)
    assert (dup.first_offset, dup.last_offset, dup.batches) == (2, 4, 0)
    with pytest.raises(OutOfOrderSequenceError):
        again.append(idem(9))
    assert again.append(idem(5)).first_offset == 5


def test_state_is_replayed_after_a_crash(tmp_path):
    log = open_log(tmp_path)
    batches = [idem(2 * i, 2) for i in range(12)]
    for b in batches:
        log.append(b)
    crash(log)
    assert snapshots(log) == []
    again = reopen(log)
    assert again.log_end_offset == 24 and snapshots(again) == [24]
    for i in (7, 11):  # a full replay (unlike a snapshot) restores all 5 retained batches
        dup = again.append(batches[i])
        assert (dup.first_offset, dup.batches) == (2 * i, 0)
    with pytest.raises(OutOfOrderSequenceError):
        again.append(batches[6])  # older than the 5 retained: neither a duplicate nor in order
    assert again.append(idem(24)).first_offset == 24


def test_state_after_a_crash_replays_from_the_last_roll_snapshot(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    batches = [idem(2 * i, 2) for i in range(12)]
    for b in batches:
        log.append(b)
    assert len(log.segments) > 2
    crash(log)
    again = reopen(log)
    assert snapshots(again)[-1] == 24
    assert again.append(batches[-1]).batches == 0
    assert again.append(idem(24)).first_offset == 24
    assert len(values(again)) == 25


def test_a_snapshot_above_a_torn_tail_is_dropped(tmp_path):
    log = open_log(tmp_path)
    kept, torn = idem(0, 2), idem(2, 2)
    log.append(kept)
    log.append(torn)
    torn_at = log.read(2, 1)
    assert torn_at is not None
    log.close()
    assert snapshots(log) == [4]
    with open(log.active_segment.log_path, "r+b") as f:
        f.truncate(torn_at.position + torn_at.size - 5)
    again = reopen(log)
    assert again.log_end_offset == 2
    assert snapshots(again) == [2]
    # The torn batch is not in the log, so its retry must be appended, not answered as a duplicate.
    info = again.append(torn)
    assert (info.first_offset, info.batches) == (2, 1)
    assert again.append(kept).batches == 0
    assert [v for v in values(again)] == [b"v0", b"v1", b"v2", b"v3"]


def test_a_roll_writes_a_snapshot_named_by_the_new_segment(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0, 3))
    segment = log.roll()
    assert segment.base_offset == 3 and snapshots(log) == [3]
    path = filenames.segment_file(log.directory, 3, filenames.SNAPSHOT_SUFFIX)
    with open(path, "rb") as f:
        (entry,) = decode_snapshot(f.read())
    assert (entry.producer_id, entry.last_seq, entry.last_data_offset) == (PID, 2, 2)
    log.tick()  # the flush the roll asked for also syncs the snapshot
    assert log._unsynced_snapshot is None


def test_retention_deletes_the_snapshots_of_deleted_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=300, file_delete_delay_ms=0)
    for i in range(12):
        log.append(idem(i))
    bases = [s.base_offset for s in log.segments]
    assert snapshots(log) == bases[1:]
    log.delete_records_before(bases[2])
    assert log.segments[0].base_offset == bases[2]
    assert snapshots(log) == bases[2:]
    log.close()
    again = reopen(log)
    assert again.log_start_offset == bases[2]
    assert again.append(idem(11)).batches == 0
    assert again.append(idem(12)).first_offset == 12


def test_a_failed_write_forgets_the_staged_batches(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0, 2))
    lost = idem(2, 2)
    with file_size_limit(log.active_segment.size + 10):
        with pytest.raises(KafkaStorageError):
            log.append(lost)
    assert log.log_end_offset == 2 and log.producer_state.end_offset == 2
    info = log.append(lost)  # the retry goes in: it never reached the log
    assert (info.first_offset, info.batches) == (2, 1)
    assert log.append(idem(0, 2)).batches == 0


def test_a_failed_write_after_a_roll_reloads_the_roll_snapshot(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    batches = [idem(i) for i in range(3)]
    for b in batches:
        log.append(b)
    log.roll()

    def full_disk(fd, buffers):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("hpbroker.storage.segment._write_all", full_disk)
    log.append(idem(3), write=False)
    log.append(idem(4), write=False)
    with pytest.raises(KafkaStorageError):
        log.write()
    monkeypatch.undo()
    assert log.log_end_offset == 3 and log.producer_state.end_offset == 3
    assert log.append(batches[-1]).batches == 0
    assert log.append(idem(3)).first_offset == 3


def test_idle_producers_expire_on_tick(tmp_path):
    log = open_log(tmp_path, producer_id_expiration_ms=1000, producer_id_expiration_check_interval_ms=500)
    log.append(idem(0, ts=10_000))
    start = log._last_producer_expiry_ms
    log.tick(start + 100)  # the check interval has not passed
    assert log.producer_state.entry(PID) is not None
    log.tick(start + 600)
    assert log.producer_state.entry(PID) is None
    assert log.append(idem(7)).batches == 1  # an unknown producer may start anywhere (KIP-360)


def test_delete_removes_the_snapshots_with_the_directory(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0))
    log.roll()
    assert snapshots(log)
    log.delete()
    assert not os.path.exists(log.directory)
    assert not any(name.startswith("t-0") for name in os.listdir(tmp_path))


def test_producer_id_expiration_is_a_broker_only_setting():
    config = LogConfig.from_broker_properties(
        {"producer.id.expiration.ms": "5000", "producer.id.expiration.check.interval.ms": "250"}
    )
    assert (config.producer_id_expiration_ms, config.producer_id_expiration_check_interval_ms) == (5000, 250)
    assert LogConfig().producer_id_expiration_ms == 86_400_000
    assert LogConfig().producer_id_expiration_check_interval_ms == 600_000
    assert is_broker_log_key("producer.id.expiration.ms")
    assert not is_topic_config_key("producer.id.expiration.ms")
    assert "producer.id.expiration.ms" not in config.topic_properties()
    assert None not in config.topic_properties()
    with pytest.raises(ConfigError):
        config.with_overrides({"producer.id.expiration.ms": "1"})
    with pytest.raises(ConfigError):
        LogConfig.from_broker_properties({"producer.id.expiration.ms": "0"})
    # Overrides keep the broker value.
    assert config.with_overrides({"retention.ms": "1"}).producer_id_expiration_ms == 5000


def test_snapshot_offsets_are_the_batch_boundaries(tmp_path):
    log = open_log(tmp_path)
    log.append(idem(0, 4))
    log.close()
    with open(filenames.segment_file(log.directory, 4, filenames.SNAPSHOT_SUFFIX), "rb") as f:
        data = f.read()
    assert struct.unpack_from(">h", data)[0] == 1 and len(decode_snapshot(data)) == 1
