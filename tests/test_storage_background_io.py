"""A log's slow file work handed to a background executor: the log goes on
appending while a roll's or ``flush.ms``'s fsync runs, moves its recovery
point only once the fsync is done, never closes or deletes a segment under
it, and leaves unlinking expired segments and removing a deleted
partition's files to the executor too."""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hpbroker.storage import KafkaStorageError, Log, LogConfig, LogManager, checkpoints as ckpt
from tests.log_helpers import make_batch, read_all

BATCH = len(make_batch(2))


@pytest.fixture
def gated():
    """A one-thread executor held shut until ``gate.set()``: a flush handed to
    it waits, as one does behind a slow disk."""
    executor, gate = ThreadPoolExecutor(1), threading.Event()
    executor.submit(gate.wait)
    yield executor, gate
    gate.set()
    executor.shutdown(wait=True)


def rolled_log(tmp_path, executor, **config) -> Log:
    log = Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(segment_bytes=BATCH, **config))
    log.storage_io = executor
    log.append(make_batch(2))
    log.append(make_batch(2))  # rolls: the first segment waits for its flush
    assert len(log.segments) == 2
    return log


def test_a_roll_flush_runs_beside_appends_and_moves_the_recovery_point_when_done(tmp_path, gated):
    executor, gate = gated
    log = rolled_log(tmp_path, executor)
    log.tick()  # hands the flush over and returns at once: the gate is shut
    assert log.flushed_offset == 0
    log.append(make_batch(2))  # the owner keeps appending meanwhile
    log.tick()
    assert log.flushed_offset == 0  # not claimed before the disk has it
    gate.set()
    executor.submit(lambda: None).result()  # the flush ran before this
    log.tick()
    assert log.flushed_offset == 2
    log.tick()  # the next roll's flush (the second segment) goes the same way
    executor.submit(lambda: None).result()
    log.tick()
    assert log.flushed_offset == 4 and log.written_offset == 6


def test_a_time_flush_goes_to_the_executor_too(tmp_path, gated):
    executor, gate = gated
    log = Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(flush_ms=1000))
    log.storage_io = executor
    log.append(make_batch(3))
    log.tick(now=log._last_flush_ms + 1000)
    assert log.flushed_offset == 0
    gate.set()
    executor.submit(lambda: None).result()
    log.tick()
    assert log.flushed_offset == 3


def test_flush_messages_stays_inline_and_waits_for_a_flush_under_way(tmp_path, gated):
    executor, gate = gated
    log = rolled_log(tmp_path, executor, flush_messages=5)
    log.tick()  # the roll's flush, held at the gate
    assert log.flushed_offset == 0
    threading.Timer(0.2, gate.set).start()
    log.append(make_batch(2))  # 6 unflushed: flush.messages fsyncs inline, after the one under way
    assert log._flush_job is None and log.flushed_offset == log.written_offset == 6


def test_close_waits_for_the_background_flush_and_leaves_everything_flushed(tmp_path, gated):
    executor, gate = gated
    log = rolled_log(tmp_path, executor)
    log.tick()
    threading.Timer(0.2, gate.set).start()  # close must wait for it, not fail on closed files
    log.close()
    assert log.flushed_offset == log.written_offset == 4
    again = Log.open(log.directory, "events", 0, log.config, recovery_point=4, clean_shutdown=True)
    assert [r.offset for r in read_all(again)] == [0, 1, 2, 3]
    again.close()


def deleted_files(log: Log) -> list[str]:
    return sorted(p for p in os.listdir(log.directory) if p.endswith(".deleted"))


def test_no_segment_is_unlinked_while_its_flush_runs(tmp_path, gated):
    executor, gate = gated
    log = rolled_log(tmp_path, executor, file_delete_delay_ms=0)
    log.tick()
    log.delete_records_before(2)  # the first segment is now only waiting for deletion
    doomed = deleted_files(log)
    assert doomed
    log.tick(now=log._last_flush_ms + 10_000)
    assert deleted_files(log) == doomed
    gate.set()
    executor.submit(lambda: None).result()
    log.tick(now=log._last_flush_ms + 10_000)  # the flush is done: the unlink is handed over
    executor.submit(lambda: None).result()
    assert not deleted_files(log)


def test_segments_past_their_delete_delay_are_unlinked_by_the_executor(tmp_path, gated):
    executor, gate = gated
    log = Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(segment_bytes=BATCH, file_delete_delay_ms=0))
    log.append(make_batch(2))
    log.append(make_batch(2))
    log.delete_records_before(2)
    log.tick()  # inline (no executor yet): the roll's flush, and the unlink
    assert not deleted_files(log)
    log.storage_io = executor
    log.append(make_batch(2))
    log.delete_records_before(4)
    log.flush()  # nothing of a flush left for tick() to hand over
    log.tick()
    assert deleted_files(log)  # handed over, behind the gate: the owner did not wait for it
    gate.set()
    executor.submit(lambda: None).result()
    assert not deleted_files(log)
    assert [r.offset for r in read_all(log)] == [4, 5]


def test_a_failed_background_fsync_is_the_logs_storage_error(tmp_path, gated, monkeypatch):
    executor, gate = gated
    log = rolled_log(tmp_path, executor)
    first = log.segments[0]

    def failing():
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(first, "flush", failing)
    log.tick()
    gate.set()
    executor.submit(lambda: None).result()
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        log.tick()
    assert log.flushed_offset == 0


def test_a_brokers_log_manager_flushes_in_the_background(tmp_path):
    logs = LogManager([str(tmp_path)], LogConfig(segment_bytes=BATCH), background_io=True).open()
    partition_log = logs.get_or_create_log("events", 0)
    assert partition_log.storage_io is not None
    partition_log.append(make_batch(2))
    partition_log.append(make_batch(2))
    logs.tick()
    logs.close()  # waits for the flush, then writes the recovery point of everything
    assert ckpt.read_offset_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint")) == {("events", 0): 4}
    reopened = LogManager([str(tmp_path)], LogConfig(segment_bytes=BATCH), background_io=True).open()
    opened = reopened.get_log("events", 0)
    assert opened is not None and opened.storage_io is not None
    reopened.close()


def test_a_deleted_partitions_directory_goes_at_once_and_its_files_in_the_background(tmp_path, gated):
    executor, gate = gated
    logs = LogManager([str(tmp_path)], LogConfig(segment_bytes=BATCH), background_io=False).open()
    partition_log = logs.get_or_create_log("events", 0)
    partition_log.storage_io = executor
    partition_log.append(make_batch(2))
    assert logs.delete_log("events", 0)
    assert not (tmp_path / "events-0").exists()  # renamed away at once: the name is free for a new topic
    assert [p for p in os.listdir(tmp_path) if p.endswith("-delete")]  # its files wait for the executor
    gate.set()
    executor.submit(lambda: None).result()
    assert not [p for p in os.listdir(tmp_path) if p.endswith("-delete")]
    logs.close()
