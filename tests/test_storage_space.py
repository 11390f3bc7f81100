"""Disk space reserved ahead of large appends: allocated past the end while a
segment is appended to, invisible in its size, given back when it stops."""

import os

import pytest

from hpbroker.clock import now_ms
from hpbroker.storage import Log, LogConfig, space
from hpbroker.storage.log_manager import LogManager
from tests.log_helpers import make_batch, read_all

BIG = 200  # records of 1 KiB: a 200 KiB batch, past space.MIN_WRITE


def open_log(path, **config):
    return Log.open(str(path / "events-0"), "events", 0, LogConfig(**config))


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


@pytest.fixture
def reserving_fs(tmp_path):
    """Skip where the file system allocates nothing ahead (no fallocate)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_CREAT | os.O_RDWR)
    try:
        if not space.reserve(fd, 0, 1 << 20):
            pytest.skip("this file system does not reserve space (fallocate)")
    finally:
        os.close(fd)
        probe.unlink()
    return tmp_path


def test_large_appends_reserve_space_past_the_end_and_a_roll_gives_it_back(reserving_fs):
    log = open_log(reserving_fs, segment_bytes=3 << 20)
    batch = make_batch(BIG, value_size=1024)
    log.append(batch)
    first = log.active_segment
    assert os.path.getsize(first.log_path) == first.size == len(batch)  # the size is what was written
    assert allocated(first.log_path) >= space.length_for(len(batch)) == 4 * len(batch)  # and three more
    appends = 1
    while log.active_segment is first:
        log.append(batch)
        appends += 1
    assert allocated(first.log_path) < first.size + 64 * 1024  # rolled: back to what it holds
    log.close()
    assert allocated(log.active_segment.log_path) < log.active_segment.size + 64 * 1024
    reopened = open_log(reserving_fs, segment_bytes=3 << 20)
    assert [r.offset for r in read_all(reopened)] == list(range(appends * BIG))  # every record, once
    reopened.close()


def test_small_appends_reserve_nothing(reserving_fs):
    log = open_log(reserving_fs)
    for _ in range(50):
        log.append(make_batch(5, value_size=100))
    segment = log.active_segment
    assert allocated(segment.log_path) < segment.size + 64 * 1024
    log.close()


def test_a_reservation_a_crash_left_is_given_back_once_the_log_closes(reserving_fs):
    log = open_log(reserving_fs)
    log.append(make_batch(3))
    path = log.active_segment.log_path
    log.close()
    fd = os.open(path, os.O_RDWR)
    try:
        assert space.reserve(fd, os.path.getsize(path), 8 << 20)  # as a crash mid-segment leaves it
    finally:
        os.close(fd)
    assert allocated(path) > (8 << 20)
    reopened = open_log(reserving_fs)
    assert [r.offset for r in read_all(reopened)] == [0, 1, 2]
    reopened.append(make_batch(2))
    reopened.close()
    assert allocated(path) < os.path.getsize(path) + 64 * 1024


def test_a_torn_tail_past_a_reservation_is_cut_on_recovery(reserving_fs):
    log = open_log(reserving_fs)
    batch = make_batch(BIG, value_size=1024)
    log.append(batch)
    log.append(batch)
    path = log.active_segment.log_path
    log.flush()
    with open(path, "ab") as f:  # a torn write after a crash: half a batch, inside the reserved space
        f.write(batch[: len(batch) // 2])
    recovered = Log.open(str(reserving_fs / "events-0"), "events", 0, LogConfig(), clean_shutdown=False)
    assert recovered.log_end_offset == 2 * BIG
    assert os.path.getsize(path) == 2 * len(batch)
    assert [r.offset for r in read_all(recovered)] == list(range(2 * BIG))
    recovered.close()


def test_without_reservations_large_appends_still_land(tmp_path, monkeypatch):
    monkeypatch.setattr(space, "_fallocate", None)  # a C library or file system without fallocate
    log = open_log(tmp_path)
    batch = make_batch(BIG, value_size=1024)
    for _ in range(3):
        log.append(batch)
    assert not log.active_segment.reserve_ahead  # stopped trying after the first refusal
    assert [r.offset for r in read_all(log)] == list(range(3 * BIG))
    log.close()


def test_a_segment_opened_only_to_read_never_cuts_the_file(reserving_fs):
    """A reader's segment reserves nothing and gives nothing back: closing it
    cannot cut what the log's writer appended after it was opened."""
    from hpbroker.storage.segment import LogSegment

    log = open_log(reserving_fs)
    batch = make_batch(BIG, value_size=1024)
    log.append(batch)
    reader = LogSegment(log.directory, 0, index_interval_bytes=4096, max_index_bytes=1 << 20, created_ms=0)
    log.append(batch)  # the writer goes on meanwhile
    reader.close()
    assert os.path.getsize(log.active_segment.log_path) == 2 * len(batch)
    log.close()


def test_a_follower_cut_back_inside_its_reservation_appends_on_and_gives_the_rest_back(reserving_fs):
    log = open_log(reserving_fs)
    batch = make_batch(BIG, value_size=1024)
    for _ in range(3):
        log.append(batch)
    log.truncate_to(BIG)  # a follower finding where it parts from a new leader
    assert os.path.getsize(log.active_segment.log_path) == len(batch)
    for _ in range(2):
        log.append(batch)
    assert [r.offset for r in read_all(log)] == list(range(3 * BIG))
    path = log.active_segment.log_path
    log.close()
    assert os.path.getsize(path) == 3 * len(batch)
    assert allocated(path) < os.path.getsize(path) + 64 * 1024


def test_a_partition_whose_large_appends_stopped_gives_its_space_back_at_a_retention_check(reserving_fs):
    """The log manager's retention check (``log.retention.check.interval.ms``)
    gives back what an active segment reserved when nothing was appended to it
    since the check before: a partition idle for days keeps no space it will
    not use.  One still taking appends keeps its reservation."""
    manager = LogManager([str(reserving_fs)], LogConfig(), retention_check_interval_ms=1000).open()
    idle, busy = manager.get_or_create_log("events", 0), manager.get_or_create_log("events", 1)
    batch = make_batch(BIG, value_size=1024)
    for partition_log in (idle, busy):
        partition_log.append(batch)
    now = now_ms()
    manager.tick(now + 1000)  # a first check: both were appended to since (nothing before)
    for partition_log in (idle, busy):
        segment = partition_log.active_segment
        assert allocated(segment.log_path) >= segment.size + 3 * len(batch)
    busy.append(batch)
    manager.tick(now + 2000)
    segment = idle.active_segment
    assert allocated(segment.log_path) < segment.size + 64 * 1024  # given back
    assert allocated(busy.active_segment.log_path) >= busy.active_segment.size + 2 * len(batch)  # kept
    idle.append(batch)  # appends again: reserves again
    assert allocated(segment.log_path) >= segment.size + 3 * len(batch)
    manager.close()
    for partition in (0, 1):
        reopened = Log.open(str(reserving_fs / f"events-{partition}"), "events", partition, LogConfig())
        assert [r.offset for r in read_all(reopened)] == list(range(2 * BIG))  # every record, once
        reopened.close()
