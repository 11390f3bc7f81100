"""The shared partition table: what one worker publishes, every worker reads
whole, across processes, and never half-written."""

import collections
import os
import signal
import struct
import time

import pytest

from hpbroker.server.ownership import partition_owner
from hpbroker.shared import partition_table
from hpbroker.shared.partition_table import (
    LEADER,
    MAX_PROBES,
    STANDALONE,
    PartitionTable,
)

WORKERS = 2


def _publish(writer, topic, partition, n, role=STANDALONE):
    """Offsets that all follow from ``n``, so a reader can tell a torn copy."""
    return writer.publish(topic, partition, role, True, n, n, 2 * n, 3 * n, 2 * n)


def _owned(topic, worker, count):
    return [p for p in range(count * WORKERS * 4) if partition_owner(topic, p, WORKERS) == worker][:count]


def test_a_partition_published_by_its_owner_is_read_by_another_process():
    table = PartitionTable(WORKERS, slots=64)
    (partition,) = _owned("t", 1, 1)
    child = os.fork()
    if child == 0:  # the owner, a forked worker as in the broker
        writer = table.writer(1)
        code = 0 if _publish(writer, "t", partition, 7, LEADER) else 1
        writer.grant_lease(time.monotonic() + 60)  # a leader's entry serves within its worker's lease
        os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    found = table.reader().read("t", partition)
    assert found is not None
    assert (found.role, found.serving, found.leader_epoch) == (LEADER, True, 7)
    assert (found.log_start, found.high_watermark, found.log_end, found.last_stable) == (7, 14, 21, 14)


def test_unknown_and_withdrawn_partitions_are_not_found():
    table = PartitionTable(WORKERS, slots=64)
    writer, reader = table.writer(0), table.reader()
    (partition,) = _owned("t", 0, 1)
    assert reader.read("t", partition) is None
    assert _publish(writer, "t", partition, 3)
    assert reader.read("t", partition) is not None
    writer.withdraw("t", partition)
    assert reader.read("t", partition) is None


def test_colliding_partitions_each_keep_their_own_entry():
    """A small region: many partitions share probe chains; withdrawn ones leave
    markers the probes step over."""
    table = PartitionTable(WORKERS, slots=32)
    writer, reader = table.writer(0), table.reader()
    partitions = _owned("busy", 0, 24)
    placed = [p for p in partitions if _publish(writer, "busy", p, p + 1)]
    assert len(placed) == 24
    for p in placed[::2]:
        writer.withdraw("busy", p)
    for p in placed:
        found = reader.read("busy", p)
        assert (found is None) if p in placed[::2] else (found is not None and found.leader_epoch == p + 1)


def test_a_full_region_publishes_nothing_more_and_says_so():
    table = PartitionTable(WORKERS, slots=8)
    writer = table.writer(0)
    partitions = _owned("many", 0, 8 + MAX_PROBES)
    results = [_publish(writer, "many", p, 1) for p in partitions]
    assert results[:8] == [True] * 8
    assert not any(results[8:])


def test_an_entry_left_mid_write_by_a_killed_worker_is_never_read():
    table = PartitionTable(WORKERS, slots=64)
    (partition,) = _owned("t", 1, 1)
    writer = table.writer(1)
    assert _publish(writer, "t", partition, 5)
    reader = table.reader()
    assert reader.read("t", partition) is not None
    offset = writer._places[("t", partition)]
    child = os.fork()
    if child == 0:  # dies between the odd counter and the body, as SIGKILL would leave it
        seq = struct.unpack_from("<q", table.memory, offset)[0]
        struct.pack_into("<q", table.memory, offset, seq | 1)
        struct.pack_into("<q", table.memory, offset + 8 * 7, -1)
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(child, 0)
    assert reader.read("t", partition) is None  # torn: the caller asks the owner
    restarted = table.writer(1)
    restarted.reset()
    assert reader.read("t", partition) is None
    assert _publish(restarted, "t", partition, 6)
    found = reader.read("t", partition)
    assert found is not None and found.leader_epoch == 6


def test_readers_never_see_a_half_written_entry_under_a_busy_writer():
    table = PartitionTable(WORKERS, slots=64)
    (partition,) = _owned("hot", 0, 1)
    assert _publish(table.writer(0), "hot", partition, 0)
    child = os.fork()
    if child == 0:
        writer = table.writer(0)
        for n in range(1, 200_000):
            _publish(writer, "hot", partition, n)
        os._exit(0)
    reader = table.reader()
    reads = torn = 0
    try:
        while True:
            pid, _ = os.waitpid(child, os.WNOHANG)
            found = reader.read("hot", partition)
            if found is None:
                torn += 1  # mid-write three times over: asked the owner instead
            else:
                reads += 1
                n = found.leader_epoch
                assert (found.log_start, found.high_watermark, found.log_end) == (n, 2 * n, 3 * n)
            if pid:
                break
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert reads > 0
    final = reader.read("hot", partition)
    assert final is not None and final.leader_epoch == 199_999


def test_slots_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        PartitionTable(WORKERS, slots=100)


def test_gone_entries_are_reused_by_the_writer():
    table = PartitionTable(WORKERS, slots=8)
    writer = table.writer(0)
    partitions = _owned("reuse", 0, 9)
    assert all(_publish(writer, "reuse", p, 1) for p in partitions[:8])
    assert not _publish(writer, "reuse", partitions[8], 2)  # full
    writer.withdraw("reuse", partitions[0])
    assert _publish(writer, "reuse", partitions[8], 2)
    reader = table.reader()
    assert reader.read("reuse", partitions[0]) is None
    found = reader.read("reuse", partitions[8])
    assert found is not None and found.leader_epoch == 2


def test_a_reader_past_its_cache_limit_forgets_and_still_finds(monkeypatch):
    """Topic names churn for months: what a reader remembers is bounded."""
    monkeypatch.setattr(partition_table, "_CACHED_MAX", 4)
    table = PartitionTable(WORKERS, slots=64)
    writer, reader = table.writer(0), table.reader()
    topics = [f"churn-{i}" for i in range(10)]
    for topic in topics:
        (partition,) = _owned(topic, 0, 1)
        assert _publish(writer, topic, partition, 1)
        assert reader.read(topic, partition) is not None
        assert len(reader._keys) <= 4
    for topic in topics:
        assert reader.read(topic, _owned(topic, 0, 1)[0]) is not None


def _batches(first: int, count: int) -> list[tuple[int, int, int, int]]:
    """``count`` one-record batches of 100 bytes from offset ``first``."""
    return [(o, o + 1, 100 * o, 100) for o in range(first, first + count)]


def test_recent_batches_are_read_with_their_partitions_offsets_newest_kept():
    table = PartitionTable(WORKERS, slots=64)
    writer, reader = table.writer(0), table.reader()
    (partition,) = _owned("t", 0, 1)
    assert writer.publish("t", partition, STANDALONE, True, 0, 0, 40, 40, 40,
                          batches=(0, (8, 99), 0, _batches(0, 40)))
    found = reader.read_with_batches("t", partition)
    assert found is not None
    offsets, recent = found
    assert offsets.high_watermark == 40 and recent is not None
    assert recent.segment_base == 0 and recent.identity == (8, 99)
    assert recent.batches == _batches(40 - partition_table.RECENT, partition_table.RECENT)
    assert _publish(writer, "t", partition, 50)  # offsets alone: the batches stay as they were
    again = reader.read_with_batches("t", partition)
    assert again is not None and again[1] == recent


def test_batches_left_at_a_place_another_partition_took_are_not_read_as_its_own():
    table = PartitionTable(WORKERS, slots=1)  # one place: the second partition takes the first's
    writer, reader = table.writer(0), table.reader()
    first, second = _owned("t", 0, 2)
    assert writer.publish("t", first, STANDALONE, True, 0, 0, 3, 3, 3, batches=(0, (1, 1), 0, _batches(0, 3)))
    writer.withdraw("t", first)
    taken = writer.publish("t", second, STANDALONE, True, 0, 0, 5, 5, 5)  # its batches not written yet
    assert taken and reader.read_with_batches("t", first) is None
    found = reader.read_with_batches("t", second)
    assert found is not None and found[1] is None, "the first partition's batches, not the second's"


def test_a_restarted_writer_leaves_no_batches_behind():
    table = PartitionTable(WORKERS, slots=64)
    (partition,) = _owned("t", 0, 1)
    assert table.writer(0).publish("t", partition, STANDALONE, True, 0, 0, 3, 3, 3,
                                   batches=(0, (1, 1), 0, _batches(0, 3)))
    restarted = table.writer(0)
    restarted.reset()
    assert restarted.publish("t", partition, STANDALONE, True, 0, 0, 3, 3, 3)
    found = table.reader().read_with_batches("t", partition)
    assert found is not None and found[1] is None


def test_batches_published_one_at_a_time_wrap_their_ring_and_a_new_generation_starts_over():
    table = PartitionTable(WORKERS, slots=64)
    writer, reader = table.writer(0), table.reader()
    (partition,) = _owned("t", 0, 1)
    recent = collections.deque(maxlen=partition_table.RECENT)

    def published(generation: int = 0):
        assert writer.publish("t", partition, STANDALONE, True, 0, 0, len(recent), len(recent), len(recent),
                              batches=(0, (1, 1), generation, recent))
        found = reader.read_with_batches("t", partition)
        assert found is not None and found[1] is not None
        return found[1].batches

    for offset in range(40):
        recent.append((offset, offset + 1, 100 * offset, 100))
        assert published() == list(recent)
    assert published() == list(recent), "nothing new: the ring as it was"
    recent.clear()  # the segment cut back (a new generation), then written again from offset 30
    recent.extend(_batches(30, 3))
    assert published(generation=1) == _batches(30, 3)
