"""Group commit (``Log.append(group_commit=True)``): the fsync ``flush.messages``
asks for is not done under the append but when the log's owner gathers its
owed writes (``group_flush``), one fsync for all of them; until then the
writes are in the file but consumers see none of them (the high watermark
stops short of them, as an inline fsync would have held it), and
``owes_flush`` tells an answer to wait.  Appends that are not group commits
(a coordinator's, a follower's) keep the inline fsync."""

import os

import pytest

from hpbroker.storage import KafkaStorageError, Log, LogConfig, LogManager, stats
from tests.log_helpers import make_batch, read_all


@pytest.fixture
def fsyncs(monkeypatch):
    """Counts the segment fsyncs (``stats.timed_fsync`` reports each)."""
    seen = []
    monkeypatch.setattr(stats, "fsync_observer", seen.append)
    return seen


def gathering_log(tmp_path, **config) -> tuple[Log, list]:
    """A log whose owner gathers group commits: ``asked`` lists each request to flush."""
    log = Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(**config))
    asked = []
    log.group_flush = asked.append
    return log, asked


def test_the_writes_of_a_turn_share_one_fsync_and_stay_unseen_until_it(tmp_path, fsyncs):
    log, asked = gathering_log(tmp_path, flush_messages=1)
    fsyncs.clear()  # opening a new log syncs its first segment
    for _ in range(3):
        log.append(make_batch(2), group_commit=True)
    assert asked == [log], "the owner is asked once until it flushes"
    assert fsyncs == [] and log.flushed_offset == 0 and log.written_offset == 6
    assert log.high_watermark == 0, "consumers see nothing the disk may not have"
    assert log.owes_flush(2) and log.owes_flush(6)
    assert len(read_all(log)) == 6, "the records are in the file, where replicas read them"
    log.flush_owed()
    assert len(fsyncs) == 1 and log.flushed_offset == 6 and log.high_watermark == 6
    assert not log.owes_flush(6)
    log.append(make_batch(1), group_commit=True)
    assert asked == [log, log], "asked again for the next turn's writes"


def test_below_flush_messages_writes_are_seen_at_once_and_the_one_that_reaches_it_is_held(tmp_path, fsyncs):
    log, asked = gathering_log(tmp_path, flush_messages=5)
    fsyncs.clear()
    log.append(make_batch(2), group_commit=True)
    log.append(make_batch(2), group_commit=True)
    assert asked == [] and log.high_watermark == 4 and not log.owes_flush(4)  # as Kafka: no fsync yet
    log.append(make_batch(2), group_commit=True)  # 6 unflushed: this write owes the fsync
    assert asked == [log] and log.owes_flush(6)
    assert log.high_watermark == 4, "held at the write that owes the fsync, never moved back"
    log.append(make_batch(1), group_commit=True)  # 1 past what is owed: below flush.messages again
    assert log.high_watermark == 4 and not log.owes_flush(7)
    log.flush_owed()
    assert log.flushed_offset == 6 and log.high_watermark == 7, "the write after it was never owed a fsync"
    assert len(fsyncs) == 1


def test_appends_that_are_not_group_commits_still_fsync_inline(tmp_path, fsyncs):
    log, asked = gathering_log(tmp_path, flush_messages=1)
    fsyncs.clear()
    log.append(make_batch(2))
    assert asked == [] and len(fsyncs) == 1 and log.flushed_offset == log.high_watermark == 2


def test_without_a_gathering_owner_a_log_manager_flushes_at_once(tmp_path, fsyncs):
    manager = LogManager([str(tmp_path)], LogConfig(flush_messages=1)).open()
    try:
        log = manager.get_or_create_log("events", 0)
        fsyncs.clear()
        log.append(make_batch(2), group_commit=True)
        assert len(fsyncs) == 1 and log.flushed_offset == log.high_watermark == 2
        asked = []
        manager.group_flush = asked.append
        log.append(make_batch(2), group_commit=True)
        assert asked == [log] and log.high_watermark == 2
        log.flush_owed()
        assert log.high_watermark == 4
    finally:
        manager.close()


def test_a_failed_fsync_keeps_the_writes_unseen_and_the_next_tick_asks_again(tmp_path, monkeypatch):
    log, asked = gathering_log(tmp_path, flush_messages=1)
    log.append(make_batch(2), group_commit=True)
    real_fsync = os.fsync

    def failing(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        log.flush_owed()
    assert isinstance(log.flush_failure, KafkaStorageError) and log.flush_failed(2)
    assert log.owes_flush(2) and log.high_watermark == 0 and log.flushed_offset == 0
    log.tick()
    assert asked == [log, log], "the owner is asked again"
    log.append(make_batch(2), group_commit=True)
    assert asked == [log, log], "once"
    assert log.owes_flush(4) and not log.flush_failed(4), "its fsync was not tried yet"
    monkeypatch.setattr(os, "fsync", real_fsync)
    log.flush_owed()
    assert log.flush_failure is None and log.high_watermark == 4 and not log.owes_flush(4)


def test_cutting_the_log_forgets_the_owed_writes_it_removes(tmp_path):
    log, _ = gathering_log(tmp_path, flush_messages=1)
    log.append(make_batch(2))
    log.append(make_batch(2), group_commit=True)
    log.append(make_batch(2), group_commit=True)
    assert log.high_watermark == 2
    log.truncate_to(4)  # cuts the last write: nobody waits for it now
    assert log.written_offset == 4 and log.owes_flush(4) and log._flush_owed_to == 4
    assert log.high_watermark == 2
    log.flush_owed()
    assert log.flushed_offset == log.high_watermark == 4


def test_close_flushes_what_is_owed(tmp_path):
    path = str(tmp_path / "events-0")
    log, _ = gathering_log(tmp_path, flush_messages=1)
    log.append(make_batch(2), group_commit=True)
    log.close()
    reopened = Log.open(path, "events", 0, LogConfig(flush_messages=1), recovery_point=2)
    assert reopened.written_offset == 2
