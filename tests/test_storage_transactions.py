"""A partition's transactions in storage: the ``.txnindex`` file (Kafka's
layout, read back by the Spark source's reader too), the aborts a log indexes
as their markers are appended (by the coordinator, or copied by a follower),
the last stable offset, the aborted transactions a read_committed fetch of a
range is told about, and all of it across a reopen, a recovery, a
truncation and a cleaning."""

import os

import numpy as np
import pytest

from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.records.control import ABORT, COMMIT
from hpbroker.spark import txnindex as spark_txnindex
from hpbroker.storage import Log, LogConfig, cleaner, log_loader
from hpbroker.storage.log import ORIGIN_COORDINATOR
from hpbroker.storage.txn_index import ENTRY, AbortedTxn, TransactionIndex

T0 = 1_700_000_000_000


# --- the file ------------------------------------------------------------------------------------
def test_entries_are_kafkas_34_bytes_and_the_spark_reader_reads_them(tmp_path):
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"))
    assert not os.path.exists(index.path)  # made at the first abort only
    assert index.append(AbortedTxn(7, 3, 10, 3))
    assert index.append(AbortedTxn(8, 5, 12, 13))
    data = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert data == ENTRY.pack(0, 7, 3, 10, 3) + ENTRY.pack(0, 8, 5, 12, 13)
    rows = spark_txnindex.read_aborted(str(tmp_path), [0])
    assert rows.tolist() == [[7, 3, 10], [8, 5, 12]]
    assert TransactionIndex(index.path).entries == index.entries  # read back on open


def test_an_abort_not_after_the_last_is_skipped_so_a_replay_adds_nothing_twice(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(AbortedTxn(1, 0, 10, 11))
    assert not index.append(AbortedTxn(1, 0, 10, 11))
    assert not index.append(AbortedTxn(2, 0, 9, 11))
    assert len(index.entries) == 1 and os.path.getsize(index.path) == ENTRY.size


def test_a_torn_last_entry_is_ignored_and_written_over(tmp_path):
    path = str(tmp_path / "x.txnindex")
    with open(path, "wb") as f:
        f.write(ENTRY.pack(0, 1, 0, 4, 5) + ENTRY.pack(0, 2, 1, 6, 7)[:20])  # a crash mid-write
    index = TransactionIndex(path)
    assert index.entries == [AbortedTxn(1, 0, 4, 5)]
    index.append(AbortedTxn(3, 5, 8, 9))
    assert TransactionIndex(path).entries == [AbortedTxn(1, 0, 4, 5), AbortedTxn(3, 5, 8, 9)]
    assert os.path.getsize(path) == 2 * ENTRY.size


def test_truncation_drops_the_aborts_whose_marker_went(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    for last in (4, 8, 12):
        index.append(AbortedTxn(last, 0, last, last + 1))
    index.truncate_to(8)
    assert [t.last_offset for t in index.entries] == [4]
    assert TransactionIndex(index.path).entries == index.entries


def test_collect_returns_what_overlaps_and_stops_once_an_lso_passes_the_range(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(AbortedTxn(1, 0, 5, 6))  # ends before the range
    index.append(AbortedTxn(2, 8, 20, 8))  # overlaps; another transaction was open from 8 on
    index.append(AbortedTxn(3, 30, 40, 41))  # starts after the range; its LSO says: done
    found, complete = index.collect(10, 25)
    assert found == [AbortedTxn(2, 8, 20, 8)] and complete
    found, complete = index.collect(10, 50)
    assert found == [AbortedTxn(2, 8, 20, 8), AbortedTxn(3, 30, 40, 41)] and not complete


# --- a log --------------------------------------------------------------------------------------
def open_log(tmp_path, **config):
    return Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(**config))


def data(pid: int, count: int = 2, *, sequence: int = 0, transactional: bool = True) -> bytes:
    records = [Record(i, T0 + i, f"k{i}".encode(), b"v") for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=sequence,
                        transactional=transactional)


def marker(pid: int, kind: int) -> bytes:
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=1, timestamp=T0)


def end(log: Log, pid: int, kind: int) -> int:
    return log.append(marker(pid, kind), origin=ORIGIN_COORDINATOR).first_offset


def aborted_in(log: Log) -> list[AbortedTxn]:
    return [t for s in log.segments for t in s.txn_index.entries]


def test_an_abort_is_indexed_with_its_range_and_lso_and_a_commit_is_not(tmp_path):
    log = open_log(tmp_path)
    log.append(data(-1, transactional=False))  # 0-1: no transaction
    assert log.last_stable_offset == 2
    log.append(data(7))  # 2-3: producer 7 opens one
    assert log.last_stable_offset == 2  # read_committed readers stop at its start
    log.append(data(8))  # 4-5: producer 8 opens another
    abort = end(log, 7, ABORT)  # 6
    assert aborted_in(log) == [AbortedTxn(7, 2, 6, 4)]  # 8's was still open, from 4
    assert log.last_stable_offset == 4
    end(log, 8, COMMIT)  # 7
    assert aborted_in(log) == [AbortedTxn(7, 2, abort, 4)]
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.aborted_transactions(0, 8) == [AbortedTxn(7, 2, 6, 4)]
    assert log.aborted_transactions(7, 8) == []  # its marker is before the range


def test_a_follower_copying_the_leaders_batches_indexes_the_same_aborts(tmp_path):
    leader = open_log(tmp_path / "leader")
    leader.append(data(7))
    leader.append(data(8, 3))
    end(leader, 7, ABORT)
    end(leader, 8, ABORT)
    everything = leader.read_records(0, 1 << 20)
    few = open_log(tmp_path / "few")  # one response: the scalar path
    few.append_as_follower(everything)
    many = open_log(tmp_path / "many")  # a batch at a time, then the scanned path for the rest
    many.append_as_follower(everything[:len(data(7))])
    many.append_as_follower(everything[len(data(7)):] + b"")
    for follower in (few, many):
        assert aborted_in(follower) == aborted_in(leader) == [AbortedTxn(7, 0, 5, 2), AbortedTxn(8, 2, 6, 7)]


def test_the_index_survives_a_clean_reopen_and_an_open_transaction_still_holds_the_lso(tmp_path):
    log = open_log(tmp_path)
    log.append(data(7))
    end(log, 7, ABORT)
    log.append(data(9))  # 3-4, left open
    log.close()
    log = open_log(tmp_path)
    assert aborted_in(log) == [AbortedTxn(7, 0, 2, 3)]
    assert log.last_stable_offset == 3
    end(log, 9, ABORT)
    assert aborted_in(log) == [AbortedTxn(7, 0, 2, 3), AbortedTxn(9, 3, 5, 6)]


def test_recovery_rebuilds_an_index_lost_with_the_tail(tmp_path):
    log = open_log(tmp_path)
    log.append(data(7))
    end(log, 7, ABORT)
    log.append(data(8))
    end(log, 8, ABORT)
    path = log.active_segment.txn_index.path
    for snapshot in log.producer_state.list_snapshots():  # as after a crash: nothing since the start
        os.unlink(log.producer_state.snapshot_path(snapshot))
    os.truncate(path, ENTRY.size + 10)  # the second entry torn
    log = Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(), clean_shutdown=False)
    assert aborted_in(log) == [AbortedTxn(7, 0, 2, 3), AbortedTxn(8, 3, 5, 6)]
    assert os.path.getsize(path) == 2 * ENTRY.size


def test_truncating_before_a_marker_reopens_its_transaction_and_drops_its_abort(tmp_path):
    log = open_log(tmp_path)
    log.append(data(7))  # 0-1
    abort = end(log, 7, ABORT)  # 2
    log.append(data(-1, transactional=False))  # 3-4
    log.truncate_to(abort)
    assert aborted_in(log) == []
    assert log.last_stable_offset == 0  # the transaction is open again: its end was cut
    end(log, 7, ABORT)
    assert aborted_in(log) == [AbortedTxn(7, 0, 2, 3)]


def test_an_abort_not_yet_below_the_high_watermark_holds_the_lso(tmp_path):
    log = open_log(tmp_path)
    log.high_watermark = 0  # replicated: the ISR moves it
    log.append(data(7))
    end(log, 7, ABORT)  # 2
    log.high_watermark = 2
    assert log.last_stable_offset == 0  # the abort is not replicated yet
    log.high_watermark = 3
    assert log.last_stable_offset == 3


def test_a_deleted_segment_takes_its_index_with_it(tmp_path):
    log = open_log(tmp_path, file_delete_delay_ms=0)
    log.append(data(7))
    end(log, 7, ABORT)
    first_index = log.active_segment.txn_index.path
    log.roll()
    log.append(data(-1, transactional=False))
    assert os.path.exists(first_index)
    log.delete_records_before(log.active_segment.base_offset)
    log.tick()
    assert not os.path.exists(first_index) and aborted_in(log) == []


def test_a_cleaned_segment_keeps_the_aborts_of_those_it_replaced(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log.append(data(7))
    end(log, 7, ABORT)  # 2
    log.append(data(8))
    end(log, 8, ABORT)  # 5
    log.roll()
    log.append(data(-1, transactional=False))
    result = cleaner.clean_log(log, T0)
    assert not result.aborted and result.groups_swapped == 1
    assert aborted_in(log) == [AbortedTxn(7, 0, 2, 3), AbortedTxn(8, 3, 5, 6)]
    log.close()
    assert aborted_in(open_log(tmp_path, cleanup_policy="compact")) == aborted_in(log)


@pytest.mark.parametrize("kind, indexed", [(ABORT, True), (COMMIT, False)])
def test_a_marker_without_an_open_transaction_indexes_nothing(tmp_path, kind, indexed):
    log = open_log(tmp_path)
    end(log, 7, kind)
    assert aborted_in(log) == [] and log.last_stable_offset == 1
    log.append(data(7))
    end(log, 7, kind)
    assert (aborted_in(log) == [AbortedTxn(7, 1, 3, 4)]) is indexed
    assert np.all(np.diff([t.last_offset for t in aborted_in(log)]) > 0)


def test_a_crash_mid_swap_keeps_the_cleaned_segments_aborts_and_drops_an_abandoned_ones(tmp_path):
    """The cleaner renames a cleaned segment's files to ``.swap`` (its
    ``.txnindex`` first, its ``.log`` last) before replacing the old ones;
    the aborts cannot be rebuilt from that one segment, so recovery finishing
    the swap takes its ``.txnindex.swap`` along, and drops one whose log never
    became a swap."""
    directory = tmp_path / "events-0"
    directory.mkdir()

    def name(base: int, suffix: str) -> str:
        return str(directory / (f"{base:020d}" + suffix))

    with open(name(0, ".log"), "wb") as f:
        f.write(encode_batch([Record(i, T0, None, b"old") for i in range(3)]))
    TransactionIndex(name(0, ".txnindex")).append(AbortedTxn(1, 0, 1, 2))
    with open(name(0, ".log.swap"), "wb") as f:
        f.write(encode_batch([Record(i, T0, None, b"new") for i in range(3)]))
    TransactionIndex(name(0, ".txnindex.swap")).append(AbortedTxn(9, 0, 2, 3))
    TransactionIndex(name(100, ".txnindex.swap")).append(AbortedTxn(5, 100, 101, 102))  # abandoned
    assert log_loader.tidy_directory(str(directory)) == [0]
    assert sorted(os.listdir(directory)) == ["00000000000000000000.log", "00000000000000000000.txnindex"]
    assert TransactionIndex(name(0, ".txnindex")).entries == [AbortedTxn(9, 0, 2, 3)]


def test_a_marker_that_cannot_be_read_is_logged_and_indexes_nothing(tmp_path, caplog):
    log = open_log(tmp_path)
    log.append(data(7))
    broken = encode_batch([Record(0, T0, b"\x00", b"")], producer_id=7, producer_epoch=0, transactional=True,
                          control=True)  # a key too short to say ABORT or COMMIT
    log.append(broken, origin=ORIGIN_COORDINATOR)
    assert aborted_in(log) == [] and log.last_stable_offset == log.high_watermark == 3
    assert any("without a readable marker" in r.getMessage() for r in caplog.records)
