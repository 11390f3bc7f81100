"""Every partition's offsets, published by its owning worker, read by all.

The table is ``workers`` regions of ``slots`` entries; worker w writes only
region w (the partitions it owns), so no entry ever has two writers and no
lock spans processes.  A reader knows a partition's owner (``ownership``, or
where it moved to) and looks only in that region.  Within a region an entry's place is found by
open addressing on (topic name hash, partition), at most ``MAX_PROBES`` steps
from its home slot; a partition that finds no place is simply not published,
and readers ask its owner as before.

Each entry is eleven little-endian int64 words, the first a sequence counter (a
seqlock): the writer makes it odd, writes the other ten words, makes it even
again; a reader copies the entry and keeps the copy only when the counter was
even and is unchanged after the copy.  A worker killed mid-write leaves the
counter odd: readers find no entry (and ask the owner) until the restarted
worker resets its region, which moves every counter on.  This relies on the
stores of one process reaching other processes in program order (x86-64's
memory model); a port to weaker orderings needs fences between the steps.
The writer remembers what each entry holds and skips a publication that
would change nothing (one follower fetch may move a high watermark through
three paths that each publish).

A replicated partition's leader decides whether it leads with facts the
entry cannot hold (its ZooKeeper session, whether its loop was paused), so
each worker also publishes a lease: until when, on the monotonic clock all
processes share, its leaderships may be trusted without asking it.  It grants
the lease from its tick, to the same instant after which it would doubt them
itself (half a session past the tick), and revokes it the moment it doubts
them; a worker that stops ticking (paused, dead) lets it run out.  A reader
counts a leader entry as serving only within its owner's lease.

Beside each entry, at the same place in a second mapping, a standalone or
leader partition's recent batches: its active segment (base offset and file
identity) and where its last ``RECENT`` written batches are in it, so a worker
serving a consumer's fetch finds them without asking the owner.  Its own
seqlock, and the partition's key again: a reader that found the entry checks
the batches are still that partition's.  The owner writes the batches before
the entry, so batches read after an entry cover everything below its high
watermark in that segment.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from hpbroker.server.ownership import partition_owner
from hpbroker.shared.region import anonymous

MAX_PROBES = 32
_CACHED_MAX = 1 << 16  # names and places remembered per process; forgotten all at once past it (topic churn)

# the state of an entry (word 4)
EMPTY = 0  # never used: a reader's probe ends here
GONE = 1  # was used: probes go on past it
STANDALONE, LEADER, FOLLOWER, OFFLINE = 2, 3, 4, 5
ROLE_CODES = {"standalone": STANDALONE, "leader": LEADER, "follower": FOLLOWER, "offline": OFFLINE}

# seq, key_hi, key_lo, partition, state, serving, leader_epoch, log_start, high_watermark, log_end, last_stable,
# has_aborts
_ENTRY = struct.Struct("<12q")
_BODY = struct.Struct("<11q")
_SEQ = struct.Struct("<q")
_KEY = struct.Struct("<qq")
_ENTRY_SIZE = _ENTRY.size
_WORDS = _ENTRY_SIZE // 8

RECENT = 16  # batches per partition
# seq, key_hi, key_lo, partition, segment base, device, inode, total; then a ring of RECENT batches (base
# offset, next offset, position, size), the segment's n-th batch written at place n % RECENT, total the count
_BATCHES = struct.Struct(f"<{8 + 4 * RECENT}q")
_BATCHES_HEAD = struct.Struct("<7q")  # after the seq
_BATCH = struct.Struct("<4q")
_BATCHES_SIZE = _BATCHES.size
_RING_AT = 64  # the ring's first batch, after the head
_LEASE = struct.Struct("@q")  # native and aligned: one 8-byte store, never seen torn


class RecentBatches(NamedTuple):
    """A consistent copy of a partition's recent batches."""
    segment_base: int
    identity: tuple[int, int]  # the segment file's (device, inode)
    batches: list[tuple[int, int, int, int]]  # (base offset, next offset, position, size), oldest first


class PartitionOffsets(NamedTuple):
    """What a reader gets: a consistent copy of one entry."""
    role: int
    serving: bool  # the owner would serve a client's request as its leader
    leader_epoch: int
    log_start: int
    high_watermark: int
    log_end: int
    last_stable: int  # the high watermark until transactions hold it back
    has_aborts: bool = False  # some aborted transaction is in the log: a read_committed reader must ask the owner

    def answers_for(self, current_leader_epoch: int) -> bool:
        """Whether a client's request naming ``current_leader_epoch`` may be
        answered from this entry as its leader would answer it (a standalone
        partition, or a leader within its worker's lease, at that epoch);
        otherwise the owner decides, and words any refusal."""
        return (self.serving and (self.role == STANDALONE or self.role == LEADER)
                and current_leader_epoch in (-1, self.leader_epoch))


def topic_key(topic: str) -> tuple[int, int]:
    """128 bits of the topic's name: the same in every process (``hash()`` of a str is not)."""
    return _KEY.unpack(hashlib.blake2b(topic.encode(), digest_size=16).digest())


def _home(key: tuple[int, int], partition: int, mask: int) -> int:
    return ((key[0] ^ (key[1] * 0x9E3779B97F4A7C15) ^ (partition * 0xC2B2AE3D27D4EB4F)) >> 7) & mask


class PartitionTable:
    """Made by the acceptor before its first fork; each worker takes ``writer(its index)`` and ``reader()``."""

    def __init__(self, workers: int, slots: int = 8192):
        if slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, got {slots}")
        self.workers = workers
        self.slots = slots
        self.memory = anonymous(workers * slots * _ENTRY_SIZE)
        self.batches = anonymous(workers * slots * _BATCHES_SIZE)
        self.leases = anonymous(workers * _LEASE.size)  # per worker: trusted until, monotonic nanoseconds

    def revoke_lease(self, worker: int) -> None:
        """``worker``'s leaderships are trusted no more (it revokes its own; the pool, a dead one's)."""
        _LEASE.pack_into(self.leases, worker * _LEASE.size, 0)

    def writer(self, worker: int) -> TableWriter:
        return TableWriter(self, worker)

    def reader(self, monotonic: Callable[[], float] = time.monotonic,
               owner_of: Callable[[str, int], int] | None = None) -> TableReader:
        return TableReader(self, monotonic, owner_of)


class TableWriter:
    """The owning worker's side: only this worker writes its region."""

    def __init__(self, table: PartitionTable, worker: int):
        self.memory = table.memory
        self.batches = table.batches
        self.table = table
        self.leases = table.leases
        self.worker = worker
        self.mask = table.slots - 1
        self.base = worker * table.slots
        self._places: dict[tuple[str, int], int] = {}  # published -> byte offset of its entry
        self._taken: set[int] = set()
        self._keys: dict[str, tuple[int, int]] = {}
        # place -> (segment base, identity, generation, batches in the ring, next offset of the newest)
        self._rings: dict[int, tuple] = {}
        # place -> the entry's words as last written: a publication that changes
        # nothing (a high watermark set twice by one follower fetch) writes nothing
        self._bodies: dict[int, tuple] = {}
        # one writer per entry is what the seqlock needs: the worker's loop, and any
        # thread of it that moves a log's offsets, take turns
        self._lock = threading.Lock()

    def grant_lease(self, until_s: float) -> None:
        """This worker's leaderships may be trusted until ``until_s`` (``time.monotonic()``)."""
        _LEASE.pack_into(self.leases, self.worker * _LEASE.size, int(until_s * 1e9))

    def revoke_lease(self) -> None:
        self.table.revoke_lease(self.worker)

    def reset(self) -> None:
        """Empty the whole region (a worker starting, maybe after a crash mid-write).
        Only entries ever written are touched (a counter of zero: never), so a
        fresh region's pages stay unallocated and the start costs no loop over it."""
        slots = self.mask + 1
        seqs = np.frombuffer(self.memory, "<i8", count=slots * _WORDS, offset=self.base * _ENTRY_SIZE)[::_WORDS]
        written = np.flatnonzero(seqs).tolist()
        del seqs  # the view pins the mapping
        for slot in written:
            offset = (self.base + slot) * _ENTRY_SIZE
            seq = _SEQ.unpack_from(self.memory, offset)[0]
            _SEQ.pack_into(self.memory, offset, seq | 1)
            _BODY.pack_into(self.memory, offset + 8, 0, 0, 0, EMPTY, 0, 0, 0, 0, 0, 0, 0)
            _SEQ.pack_into(self.memory, offset, (seq | 1) + 1)
            self._write_batches(offset, (0, 0), 0, 0, (0, 0), -1, ())
        self._places.clear()
        self._rings.clear()
        self._bodies.clear()
        self._taken.clear()

    def publish(self, topic: str, partition: int, role: int, serving: bool, leader_epoch: int, log_start: int,
                high_watermark: int, log_end: int, last_stable: int,
                batches: tuple[int, tuple[int, int], int, Sequence[tuple[int, int, int, int]]] | None = None,
                *, has_aborts: bool = False) -> bool:
        """Write the partition's entry, and with ``batches`` (its active
        segment's base offset, file identity, a generation that moves whenever
        its batches are cut, and its recent batches) those first; False when it
        has no place (readers then ask the owner)."""
        offset = self._places.get((topic, partition))
        key = self._keys.get(topic)
        if key is None:
            if len(self._keys) >= _CACHED_MAX:
                self._keys.clear()
            key = self._keys[topic] = topic_key(topic)
        if offset is None:
            offset = self._claim(key, partition)
            if offset is None:
                return False
            self._places[(topic, partition)] = offset
        if batches is not None:
            self._write_batches(offset, key, partition, *batches)
        body = (key[0], key[1], partition, role, int(serving), leader_epoch, log_start, high_watermark, log_end,
                last_stable, int(has_aborts))
        with self._lock:
            if self._bodies.get(offset) != body:
                self._write(offset, *body)
                self._bodies[offset] = body
        return True

    def _write_batches(self, offset: int, key: tuple[int, int], partition: int, segment_base: int,
                       identity: tuple[int, int], generation: int,
                       batches: Sequence[tuple[int, int, int, int]]) -> None:
        """The recent batches of the partition whose entry is at ``offset``:
        only those written since the last call, unless the segment or its
        generation changed; nothing at all when none are new."""
        at = offset // _ENTRY_SIZE * _BATCHES_SIZE
        ring = self._rings.get(offset)
        if ring is not None and ring[0] == segment_base and ring[1] == identity and ring[2] == generation:
            total, newest = ring[3], ring[4]
            if not batches or batches[-1][1] <= newest:  # the usual repeat: nothing written since
                return
            new = []
            # a copy first (one C call: a thread writing the segment cannot change it under us)
            for batch in reversed(list(batches)):  # newest first; usually one
                if batch[1] <= newest:
                    break
                new.append(batch)
            if not new:
                return
            new.reverse()
        else:
            total, new = 0, list(batches)
        new = new[-RECENT:]
        memory = self.batches
        with self._lock:
            seq = _SEQ.unpack_from(memory, at)[0] | 1
            _SEQ.pack_into(memory, at, seq)
            for batch in new:
                _BATCH.pack_into(memory, at + _RING_AT + (total % RECENT) * _BATCH.size, *batch)
                total += 1
            _BATCHES_HEAD.pack_into(memory, at + 8, key[0], key[1], partition, segment_base, identity[0],
                                    identity[1], total)
            _SEQ.pack_into(memory, at, seq + 1)
        self._rings[offset] = (segment_base, identity, generation, total, new[-1][1] if new else -1)

    def withdraw(self, topic: str, partition: int) -> None:
        offset = self._places.pop((topic, partition), None)
        if offset is not None:
            self._rings.pop(offset, None)
            with self._lock:
                self._bodies.pop(offset, None)
                self._write(offset, 0, 0, 0, GONE, 0, 0, 0, 0, 0, 0, 0)
            self._taken.discard(offset)

    def _claim(self, key: tuple[int, int], partition: int) -> int | None:
        home = _home(key, partition, self.mask)
        for step in range(MAX_PROBES):
            offset = (self.base + ((home + step) & self.mask)) * _ENTRY_SIZE
            if offset not in self._taken:
                self._taken.add(offset)
                return offset
        return None

    def _write(self, offset: int, *body: int) -> None:
        """Rewrite the entry at ``offset``; the caller holds ``_lock``."""
        memory = self.memory
        seq = _SEQ.unpack_from(memory, offset)[0] | 1
        _SEQ.pack_into(memory, offset, seq)  # odd: being written
        _BODY.pack_into(memory, offset + 8, *body)
        _SEQ.pack_into(memory, offset, seq + 1)


class TableReader:
    """Any worker's side: lock-free reads of every region."""

    def __init__(self, table: PartitionTable, monotonic: Callable[[], float] = time.monotonic,
                 owner_of: Callable[[str, int], int] | None = None):
        # the worker whose region holds a partition: its hashed owner, unless it moved (workers/partition_moves.py)
        self.owner_of = owner_of or (lambda topic, partition: partition_owner(topic, partition, self.workers))
        self.memory = table.memory
        self.batches = table.batches
        self.leases = table.leases
        self.monotonic = monotonic
        self.workers = table.workers
        self.slots = table.slots
        self.mask = table.slots - 1
        self._keys: dict[str, tuple[int, int]] = {}
        self._places: dict[tuple[str, int], int] = {}  # where it was found last

    def read(self, topic: str, partition: int) -> PartitionOffsets | None:
        """The partition's published offsets, or None (not published, or being rewritten: ask the owner)."""
        found = self._find(topic, partition)
        return None if found is None else found[1]

    def read_with_batches(self, topic: str, partition: int) -> tuple[PartitionOffsets, RecentBatches | None] | None:
        """The partition's offsets and then its recent batches (None when they
        are not published, or not its own any more, or being rewritten)."""
        found = self._find(topic, partition)
        if found is None:
            return None
        offset, offsets = found
        at = offset // _ENTRY_SIZE * _BATCHES_SIZE
        memory = self.batches
        key = self._keys[topic]
        for _ in range(3):
            words = _BATCHES.unpack_from(memory, at)
            if words[0] & 1 == 0 and _SEQ.unpack_from(memory, at)[0] == words[0]:
                break
        else:
            return offsets, None
        if words[1] != key[0] or words[2] != key[1] or words[3] != partition or words[0] == 0:
            return offsets, None
        total = words[7]
        it = iter(words[8:])
        ring = list(zip(it, it, it, it))
        if total <= RECENT:
            batches = ring[:total]
        else:  # oldest at the place the next one goes
            oldest = total % RECENT
            batches = ring[oldest:] + ring[:oldest]
        return offsets, RecentBatches(words[4], (words[5], words[6]), batches)

    def _find(self, topic: str, partition: int) -> tuple[int, PartitionOffsets] | None:
        """Where the partition's entry is, and a consistent copy of it."""
        key = self._keys.get(topic)
        if key is None:
            if len(self._keys) >= _CACHED_MAX or len(self._places) >= _CACHED_MAX:
                self._keys.clear()
                self._places.clear()
            key = self._keys[topic] = topic_key(topic)
        known = self._places.get((topic, partition))
        if known is not None:
            found = self._match(known, key, partition)
            if found is not None:
                return known, found
        base = self.owner_of(topic, partition) * self.slots
        home = _home(key, partition, self.mask)
        for step in range(MAX_PROBES):
            offset = (base + ((home + step) & self.mask)) * _ENTRY_SIZE
            entry = self._copy(offset)
            if entry is None or entry[4] == EMPTY:
                return None
            if entry[1] == key[0] and entry[2] == key[1] and entry[3] == partition and entry[4] != GONE:
                self._places[(topic, partition)] = offset
                return offset, self._offsets(entry, offset)
        return None

    def _match(self, offset: int, key: tuple[int, int], partition: int) -> PartitionOffsets | None:
        entry = self._copy(offset)
        if entry is None or entry[1] != key[0] or entry[2] != key[1] or entry[3] != partition or entry[4] <= GONE:
            return None
        return self._offsets(entry, offset)

    def _offsets(self, entry: tuple, offset: int) -> PartitionOffsets:
        serving = bool(entry[5])
        if serving and entry[4] == LEADER:  # and only while its owner's lease runs
            owner = offset // _ENTRY_SIZE // self.slots
            serving = _LEASE.unpack_from(self.leases, owner * _LEASE.size)[0] > self.monotonic() * 1e9
        leader_epoch, log_start, high_watermark, log_end, last_stable, has_aborts = entry[6:]
        return PartitionOffsets(entry[4], serving, leader_epoch, log_start, high_watermark, log_end, last_stable,
                                bool(has_aborts))

    def _copy(self, offset: int) -> tuple | None:
        """A consistent copy of the entry, or None when its writer is mid-write (or died there)."""
        memory = self.memory
        for _ in range(3):
            entry = _ENTRY.unpack_from(memory, offset)
            if entry[0] & 1 == 0 and _SEQ.unpack_from(memory, offset)[0] == entry[0]:
                return entry
        return None
