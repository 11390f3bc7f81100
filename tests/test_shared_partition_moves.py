"""The shared map of partitions handed between workers
(``hpbroker/shared/partition_moves.py``): the latest hand-over names the
owner, a reader rebuilds only when a writer's generation moved, a worker
killed mid-record leaves no torn record, and stale slots are reused."""

import os
import signal
import struct

from hpbroker.shared.partition_moves import Move, MovesReader, PartitionMoves
from hpbroker.shared.partition_table import topic_key


def to(reader: MovesReader, topic: str, partition: int) -> int | None:
    """The worker the partition was last handed to (None: never handed over)."""
    move = reader.move(topic, partition)
    return None if move is None else move.to


def test_the_latest_hand_over_names_the_owner_in_every_reader():
    moves = PartitionMoves(3, slots=8)
    reader, other = moves.reader(), moves.reader()
    assert reader.move("t", 0) is None and not reader.any()
    assert moves.writer(1).record("t", 0, Move(1, 0, 500, 10), reader)
    assert reader.move("t", 0) == Move(1, 0, 500, 10)
    assert other.move("t", 0) == Move(1, 0, 500, 10)
    assert other.move("t", 1) is None and other.move("u", 0) is None
    # worker 0 hands it on to worker 2: the higher number wins, whatever region holds it
    assert moves.writer(0).record("t", 0, Move(2, 2, 900, 10), other)
    assert reader.move("t", 0) == Move(2, 2, 900, 10)
    assert to(other, "t", 0) == 2


def test_a_reader_reads_the_regions_again_only_when_a_generation_moved():
    moves = PartitionMoves(2, slots=8)
    reader = moves.reader()
    writer = moves.writer(0)
    assert writer.record("t", 3, Move(1, 1, 0, 0), reader)
    assert to(reader, "t", 3) == 1
    # a record changed behind the generation's back is not seen: nothing was re-read
    slot_at = moves.region_at(0)
    struct.pack_into("<q", moves.memory, slot_at + 5 * 8, 0)
    assert to(reader, "t", 3) == 1
    # the next record moves the generation, and everything is read again
    assert writer.record("t", 4, Move(1, 1, 0, 0), reader)
    assert to(reader, "t", 3) == 0


def test_a_writer_killed_mid_record_leaves_the_map_as_it_was():
    """A child takes the region's generation odd and writes half a record, then
    is SIGKILLed: readers keep what they read before; the restarted writer
    evens the generation, and the half record, never marked taken, is not read."""
    moves = PartitionMoves(2, slots=8)
    reader = moves.reader()
    assert moves.writer(1).record("t", 0, Move(1, 0, 0, 0), reader)
    assert to(reader, "t", 0) == 0
    pid = os.fork()
    if pid == 0:  # the dying writer
        generation_at = moves.generation_at(1)
        generation = struct.unpack_from("<q", moves.memory, generation_at)[0]
        struct.pack_into("<q", moves.memory, generation_at, generation | 1)
        key = topic_key("t")
        struct.pack_into("<4q", moves.memory, moves.region_at(1) + 64, 0, key[0], key[1], 1)  # untaken, half
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    assert struct.unpack_from("<q", moves.memory, moves.generation_at(1))[0] & 1
    fresh = moves.reader()
    assert to(reader, "t", 0) == 0  # the whole map as it was read
    assert fresh.move("t", 0) is None  # a reader that never saw it whole: no move yet (it looks again)
    moves.writer(1)  # its restarted incarnation
    assert to(fresh, "t", 0) == 0 and fresh.move("t", 1) is None
    assert to(reader, "t", 0) == 0


def test_stale_records_free_their_slots_and_a_full_region_refuses():
    moves = PartitionMoves(2, slots=2)
    reader = moves.reader()
    writer = moves.writer(0)
    assert writer.record("a", 0, Move(1, 1, 0, 0), reader)
    assert writer.record("b", 0, Move(1, 1, 0, 0), reader)
    assert not writer.has_room("c", 0, reader)
    assert not writer.record("c", 0, Move(1, 1, 0, 0), reader)
    assert reader.move("c", 0) is None
    # "a" comes back (worker 1 hands it to worker 0): worker 0's record of it is stale now
    assert moves.writer(1).record("a", 0, Move(2, 0, 0, 0), reader)
    assert to(reader, "a", 0) == 0
    assert writer.has_room("c", 0, reader)
    assert writer.record("c", 0, Move(1, 1, 0, 0), reader)
    assert to(reader, "c", 0) == 1 and to(reader, "a", 0) == 0 and to(reader, "b", 0) == 1
    # the same partition handed on again reuses its own slot
    assert writer.record("b", 0, Move(3, 1, 7, 0), reader)
    assert reader.move("b", 0) == Move(3, 1, 7, 0)
