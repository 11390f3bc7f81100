"""KIP-890 part 1 on the owning worker's side (``Partitions.append`` and its
``_txn_guard``, ``Partitions.write_marker``), in process over a real log
directory: a transactional batch that would open its producer's transaction
on a partition is not appended but answered with a guard; re-sent with that
guard (the coordinator having confirmed the partition) it is appended; a
marker ends the guard, so a confirmed batch arriving after the transaction
ended is refused instead of opening one nobody will end."""

import asyncio

import pytest

from hpbroker.clock import now_ms
from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch, iter_batches
from hpbroker.records.control import parse_control_record
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.owner_calls import Append, WriteMarker
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.topics import TopicRegistry

PID = 7000


@pytest.fixture
def partitions(tmp_path):
    dirs = [str(tmp_path)]
    topics = TopicRegistry(dirs, LogConfig())
    logs = LogManager(dirs, LogConfig()).open()
    asyncio.run(topics.create("t", 2))
    yield Partitions(logs, topics)
    logs.close()


def txn_batch(*values: bytes, pid: int = PID, epoch: int = 0, sequence: int = 0, transactional: bool = True):
    ts = now_ms()
    return bytearray(encode_batch([Record(i, ts, None, v) for i, v in enumerate(values)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=sequence, transactional=transactional))


def stored(partitions: Partitions, partition: int = 0) -> list[tuple[bool, bytes | None]]:
    """(is a marker, value) of every record in t-<partition>."""
    log = partitions.log_of("t", partition)
    assert log is not None
    return [(b.header.is_control, r.value) for b in iter_batches(log.read_records(0, 1 << 20)) for r in b.records]


def end_offset(partitions: Partitions, partition: int = 0) -> int:
    log = partitions.log_of("t", partition)
    return 0 if log is None else log.log_end_offset


def test_the_first_transactional_batch_waits_for_the_coordinator(partitions):
    asked = partitions.append(Append("t", 0, txn_batch(b"a")))
    assert (asked.error, asked.base_offset) == (ErrorCode.none, -1) and asked.verify > 0
    assert end_offset(partitions) == 0  # nothing appended yet
    again = partitions.append(Append("t", 0, txn_batch(b"a")))  # a retry before the answer: the same guard
    assert again.verify == asked.verify
    appended = partitions.append(Append("t", 0, txn_batch(b"a"), verified=asked.verify))
    assert (appended.error, appended.base_offset, appended.verify) == (ErrorCode.none, 0, 0)
    # the transaction is open here now: its next batches need no check
    more = partitions.append(Append("t", 0, txn_batch(b"b", sequence=1)))
    assert (more.error, more.base_offset, more.verify) == (ErrorCode.none, 1, 0)
    assert stored(partitions) == [(False, b"a"), (False, b"b")]


def test_guards_are_per_partition_and_per_producer(partitions):
    one = partitions.append(Append("t", 0, txn_batch(b"x"))).verify
    other_partition = partitions.append(Append("t", 1, txn_batch(b"x"))).verify
    other_producer = partitions.append(Append("t", 0, txn_batch(b"x", pid=PID + 1))).verify
    assert len({one, other_partition, other_producer}) == 3 and 0 not in (one, other_partition, other_producer)
    wrong = partitions.append(Append("t", 0, txn_batch(b"x"), verified=other_producer))
    assert (wrong.error, end_offset(partitions)) == (ErrorCode.invalid_txn_state, 0)


def test_plain_and_idempotent_batches_are_not_held(partitions):
    plain = partitions.append(Append("t", 0, bytearray(encode_batch([Record(0, now_ms(), None, b"p")]))))
    idempotent = partitions.append(Append("t", 0, txn_batch(b"i", transactional=False)))
    assert [(r.error, r.verify) for r in (plain, idempotent)] == [(ErrorCode.none, 0)] * 2
    assert end_offset(partitions) == 2


def test_a_marker_ends_the_guard_so_a_late_confirmed_batch_is_refused(partitions):
    written: list[tuple[str, int, int, bool]] = []
    partitions.on_marker = lambda topic, partition, pid, commit: written.append((topic, partition, pid, commit))
    first = partitions.append(Append("t", 0, txn_batch(b"a"))).verify
    assert partitions.append(Append("t", 0, txn_batch(b"a"), verified=first)).error == ErrorCode.none
    # a second produce was confirmed (before the transaction ended) under a guard of the partition ...
    late = partitions.append(Append("t", 1, txn_batch(b"late"))).verify
    marker = partitions.write_marker(WriteMarker("t", 1, PID, 0, 3, False))  # the abort reaches t-1 first
    assert marker.error == ErrorCode.none
    # ... and arrives after the marker: refused, nothing appended, no transaction left open
    refused = partitions.append(Append("t", 1, txn_batch(b"late"), verified=late))
    assert refused.error == ErrorCode.invalid_txn_state
    assert [is_marker for is_marker, _value in stored(partitions, 1)] == [True]
    assert the_marker(partitions, 1) == (PID, 0, "ABORT", 3)
    log = partitions.log_of("t", 1)
    assert log is not None and log.last_stable_offset == log.log_end_offset
    assert partitions.write_marker(WriteMarker("t", 0, PID, 0, 3, False)).error == ErrorCode.none
    assert written == [("t", 1, PID, False), ("t", 0, PID, False)]
    # the next transaction's first batch is held again, under a new guard
    nxt = partitions.append(Append("t", 0, txn_batch(b"n", sequence=1)))
    assert nxt.verify not in (0, first)


def the_marker(partitions: Partitions, partition: int) -> tuple[int, int, str, int]:
    """(producer id, epoch, kind, coordinator epoch) of the partition's one marker."""
    log = partitions.log_of("t", partition)
    assert log is not None
    [batch] = [b for b in iter_batches(log.read_records(0, 1 << 20)) if b.header.is_control]
    control = parse_control_record(batch.records[0])
    return batch.header.producer_id, batch.header.producer_epoch, control.kind_name, control.coordinator_epoch


def test_a_new_epoch_needs_a_new_guard(partitions):
    old = partitions.append(Append("t", 0, txn_batch(b"a"))).verify
    bumped = partitions.append(Append("t", 0, txn_batch(b"a", epoch=1)))
    assert bumped.verify not in (0, old)
    stale = partitions.append(Append("t", 0, txn_batch(b"a", epoch=1), verified=old))
    assert (stale.error, end_offset(partitions)) == (ErrorCode.invalid_txn_state, 0)
    assert partitions.append(Append("t", 0, txn_batch(b"a", epoch=1), verified=bumped.verify)).error == ErrorCode.none


def test_a_marker_for_an_unknown_partition(partitions):
    assert partitions.write_marker(WriteMarker("t", 5, PID, 0, 0, True)).error == ErrorCode.unknown_topic_or_partition
    assert partitions.write_marker(WriteMarker("nope", 0, PID, 0, 0, True)).error == \
        ErrorCode.unknown_topic_or_partition


def test_a_marker_from_a_coordinator_that_was_succeeded_is_refused(partitions):
    first = partitions.append(Append("t", 0, txn_batch(b"a"))).verify
    partitions.append(Append("t", 0, txn_batch(b"a"), verified=first))
    assert partitions.write_marker(WriteMarker("t", 0, PID, 0, 5, True)).error == ErrorCode.none
    end = end_offset(partitions)
    stale = partitions.write_marker(WriteMarker("t", 0, PID, 0, 4, False))
    assert (stale.error, end_offset(partitions)) == (ErrorCode.transaction_coordinator_fenced, end)
    assert partitions.write_marker(WriteMarker("t", 0, PID, 0, 5, True)).error == ErrorCode.none  # the same epoch
