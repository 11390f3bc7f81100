"""Where a standalone partition lives when it no longer lives with the worker
its hash names: the record of each hand-over, written by the worker that gave
the partition up, read by every worker routing a call.

A partition's owner is the worker ``ownership.partition_owner`` names until
its owner hands it to another (``workers/partition_moves.py`` decides when).
The worker giving it up writes one record in its own region: the partition,
the worker it goes to, a move number one past the highest the partition had,
and what the new owner opens the log with (its recovery point and log start
offset: the log was closed without an fsync, so a crash afterwards recovers
from where the old owner's fsyncs had reached).  The owner is the target of
the record with the highest move number, or the hashed owner when there is
none.  Only the current owner gives a partition up, so no two records ever
carry the same number for one partition, and no region has two writers.

Each region has a generation counter (all of them side by side at the head of
the mapping, one read for all): odd while its worker writes a record, even
otherwise.  A reader keeps what it built from all the regions
with the counters it saw, and rebuilds only when one moved: a call routed
while nothing moved costs one read of the counters.  A record is marked taken
only once it is whole.  A worker killed while writing leaves its counter odd;
readers then keep what they last built, and its restarted incarnation
finishes the count (``MovesWriter`` makes it even again) without touching the
records, which stay true across its restart (a half-written one was never
marked taken).
A record is stale once another record for its partition carries a higher
number; its slot is then free for the next hand-over from that region.  The
whole map dies with the broker: a broker started afresh opens every partition
where its hash says (each log recovered from a clean or unclean stop as
usual).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from hpbroker.shared.partition_table import topic_key
from hpbroker.shared.region import anonymous

SLOTS = 1024  # records per worker's region: partitions it handed over and that have not moved on since
# taken (0 free, 1 taken), key_hi, key_lo, partition, move number, to worker, recovery point, log start
_RECORD = struct.Struct("<8q")
_WORDS = _RECORD.size // 8
_GENERATION = struct.Struct("<q")
_TAKEN = struct.Struct("<q")


class Move(NamedTuple):
    number: int  # this partition's hand-overs so far
    to: int  # the worker owning it now
    recovery_point: int  # fsynced below this when it was handed over
    log_start: int


class PartitionMoves:
    """Made by the acceptor before its first fork; each worker takes ``writer(its index)`` and ``reader()``."""

    def __init__(self, workers: int, slots: int = SLOTS):
        self.workers = workers
        self.slots = slots
        self.head_bytes = -(-workers * _GENERATION.size // 64) * 64  # the generations, whole cache lines
        self.region_bytes = slots * _RECORD.size
        self.memory = anonymous(self.head_bytes + workers * self.region_bytes)

    def generation_at(self, worker: int) -> int:
        return worker * _GENERATION.size

    def region_at(self, worker: int) -> int:
        return self.head_bytes + worker * self.region_bytes

    def writer(self, worker: int) -> MovesWriter:
        return MovesWriter(self, worker)

    def reader(self) -> MovesReader:
        return MovesReader(self)


class MovesReader:
    """Any worker's view: ``move(topic, partition)`` is the latest hand-over of
    the partition, or None when it never left its hashed owner."""

    def __init__(self, moves: PartitionMoves):
        self.moves = moves
        self.memory = moves.memory
        self._stamp_bytes = moves.workers * _GENERATION.size
        self._stamp: bytes | None = None  # built on first use (a restarted worker finds earlier moves)
        self._latest: dict[tuple[int, int, int], Move] = {}
        self._rows: dict[int, list[tuple[int, ...]]] = {}  # per region, its records as last read whole
        self._keys: dict[str, tuple[int, int]] = {}

    def any(self) -> bool:
        """Whether any partition was ever handed over (the common answer, no: one read of the counters)."""
        if self.memory[:self._stamp_bytes] != self._stamp:
            self._refresh()
        return bool(self._latest)

    def move(self, topic: str, partition: int) -> Move | None:
        if self.memory[:self._stamp_bytes] != self._stamp:
            self._refresh()
        if not self._latest:
            return None
        key = self._keys.get(topic)
        if key is None:
            if len(self._keys) >= 1 << 16:
                self._keys.clear()
            key = self._keys[topic] = topic_key(topic)
        return self._latest.get((key[0], key[1], partition))

    def number(self, key_hi: int, key_lo: int, partition: int) -> int:
        """The partition's latest move number as last read (0: never moved)."""
        found = self._latest.get((key_hi, key_lo, partition))
        return 0 if found is None else found.number

    def _refresh(self) -> None:
        """Rebuild from every region (the callers saw a generation move)."""
        stamp = self.memory[:self._stamp_bytes]
        latest: dict[tuple[int, int, int], Move] = {}
        whole = True
        for worker in range(self.moves.workers):
            rows = self._region_rows(worker)
            if rows is None:  # mid-write (or its writer died there): what it said before, and look again
                whole = False
                rows = self._rows.get(worker, [])
            self._rows[worker] = rows
            for row in rows:
                key = (row[1], row[2], row[3])
                found = latest.get(key)
                if found is None or row[4] > found.number:
                    latest[key] = Move(row[4], row[5], row[6], row[7])
        self._latest = latest
        self._stamp = stamp if whole else None

    def _region_rows(self, worker: int) -> list[tuple[int, ...]] | None:
        """The taken records of ``worker``'s region, or None while it is being written."""
        memory = self.memory
        slots = self.moves.slots
        generation_at, at = self.moves.generation_at(worker), self.moves.region_at(worker)
        for _ in range(3):
            before = _GENERATION.unpack_from(memory, generation_at)[0]
            if before & 1:
                continue
            if before == 0:
                return []  # never written
            words = np.frombuffer(memory, "<i8", count=slots * _WORDS, offset=at)
            table = words.reshape(slots, _WORDS).copy()
            del words  # the view pins the mapping
            if _GENERATION.unpack_from(memory, generation_at)[0] == before:
                return [tuple(int(v) for v in row) for row in table[table[:, 0] == 1]]
        return None


class MovesWriter:
    """The side of the worker handing partitions over: only it writes its region."""

    def __init__(self, moves: PartitionMoves, worker: int):
        self.moves = moves
        self.memory = moves.memory
        self.generation_at, self.at = moves.generation_at(worker), moves.region_at(worker)
        generation = _GENERATION.unpack_from(self.memory, self.generation_at)[0]
        if generation & 1:  # an earlier incarnation died mid-write: its record is whole or not taken
            _GENERATION.pack_into(self.memory, self.generation_at, generation + 1)

    def record(self, topic: str, partition: int, move: Move, reader: MovesReader) -> bool:
        """Write the hand-over ``move`` of the partition; False when the region
        has no free slot (nothing is handed over then)."""
        key = topic_key(topic)
        slot = self._free_slot(key, partition, reader)
        if slot is None:
            return False
        memory = self.memory
        at = self.at + slot * _RECORD.size
        generation = _GENERATION.unpack_from(memory, self.generation_at)[0] | 1
        _GENERATION.pack_into(memory, self.generation_at, generation)  # odd: being written
        # taken last: a worker killed mid-record leaves a slot nobody reads, never a torn record
        _TAKEN.pack_into(memory, at, 0)
        _RECORD.pack_into(memory, at, 0, key[0], key[1], partition, move.number, move.to, move.recovery_point,
                          move.log_start)
        _TAKEN.pack_into(memory, at, 1)
        _GENERATION.pack_into(memory, self.generation_at, generation + 1)
        return True

    def has_room(self, topic: str, partition: int, reader: MovesReader) -> bool:
        return self._free_slot(topic_key(topic), partition, reader) is not None

    def _free_slot(self, key: tuple[int, int], partition: int, reader: MovesReader) -> int | None:
        """This region's earlier record of the partition, else one free or stale."""
        memory = self.memory
        stale = None
        for slot in range(self.moves.slots):
            words = _RECORD.unpack_from(memory, self.at + slot * _RECORD.size)
            if words[0] == 0:
                return slot if stale is None else stale
            if words[1] == key[0] and words[2] == key[1] and words[3] == partition:
                return slot
            if stale is None and reader.number(words[1], words[2], words[3]) > words[4]:
                stale = slot
        return stale
