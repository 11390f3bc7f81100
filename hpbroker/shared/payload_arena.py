"""Record payloads on their way from the worker holding a client's connection
to the worker owning the partition: the sender copies the batch into its own
region of shared memory and sends a reference (``ArenaRef``) over the peer
channel instead of the bytes; the owner appends straight from the slot (its
``write()`` is the only copy out).  The socket, the channel's framing and the
codec never carry the payload.

Region w is written only by worker w (single writer), as a ring of slots:
``[token][size][payload]`` padded to 8 bytes.  A slot is live from ``put``
until the sender learns the owner is done with it (its answer arrived, or
its channel closed), then ``release``d; space is reused oldest first, and an
empty ring starts over at the region's start, so a lightly used region
touches only its first pages.  The owner only reads a slot, never writes it:
what an append stamps (offsets, epoch) goes into a private copy of the
batch's head.

Why a reference can be trusted: a slot is never rewritten while live, and a
worker that dies and restarts bumps its region's incarnation (the region's
first word) before it writes anything.  Every rewrite of a slot first clears
its token.  So the owner reads the incarnation and the slot's token
(``view``), reads the payload, and reads both again (``unchanged``): what it
read is kept only when all four match the reference, so a slot rewritten by
a restarted sender (or a reference that is simply wrong) is refused, never
appended torn.  The log checks ``unchanged`` after its write and before
anyone may read what it wrote, and undoes the write when it fails.  This
relies on x86-64 keeping one process's stores in order, as the partition
table does.
"""

from __future__ import annotations

import collections
import struct
from typing import NamedTuple

from hpbroker.shared.region import anonymous

REGION_BYTES = 16 << 20  # per worker; pages touched only as used
_HEADER = 64  # the incarnation word, then padding to a cache line
_WORD = struct.Struct("<q")
_SLOT_HEAD = struct.Struct("<qq")  # token, size
_TOKEN_BITS = 40  # a token is (incarnation << 40) | the slot's number in this incarnation


class ArenaRef(NamedTuple):
    """Where a payload is: the sender's region, the slot's offset in it, the
    payload's size, and the token that slot was written with."""
    worker: int
    offset: int
    size: int
    token: int


class PayloadArena:
    """Made by the acceptor before its first fork; a worker takes ``sender(its index)``
    and ``receiver()``."""

    def __init__(self, workers: int, region_bytes: int = REGION_BYTES):
        if region_bytes % 8 or region_bytes <= _HEADER:
            raise ValueError(f"region_bytes must be a multiple of 8 above {_HEADER}, got {region_bytes}")
        self.workers = workers
        self.region_bytes = region_bytes
        self.memory = anonymous(workers * region_bytes)

    def sender(self, worker: int) -> ArenaSender:
        return ArenaSender(self, worker)

    def receiver(self) -> ArenaReceiver:
        return ArenaReceiver(self)


class ArenaSender:
    """One worker's region, written from its event loop only."""

    def __init__(self, arena: PayloadArena, worker: int):
        self.memory = arena.memory
        self.worker = worker
        self.base = worker * arena.region_bytes
        self.capacity = arena.region_bytes - _HEADER
        self.largest = self.capacity // 4  # a larger payload goes inline: one batch must not starve the rest
        self._data = self.base + _HEADER  # where slot offsets count from
        self._ring: collections.deque[list] = collections.deque()  # [start, end, live], oldest first
        self._slots: dict[int, list] = {}  # token -> its slot
        # a worker starting (maybe after its predecessor died with slots in flight):
        # a new incarnation first, so every earlier reference to this region fails
        incarnation = _WORD.unpack_from(self.memory, self.base)[0] + 1
        _WORD.pack_into(self.memory, self.base, incarnation)
        self._next_token = incarnation << _TOKEN_BITS

    @property
    def live(self) -> int:
        return len(self._slots)

    def put(self, payload) -> ArenaRef | None:
        """Copy ``payload`` into a free slot; None when it does not fit now (send it inline)."""
        size = len(payload)
        if size > self.largest:
            return None
        need = (_SLOT_HEAD.size + size + 7) & ~7
        ring = self._ring
        if not ring:
            start = 0
        else:
            oldest, newest = ring[0][0], ring[-1][1]
            if ring[-1][0] >= oldest:  # not wrapped: free after the newest, then before the oldest
                start = newest if newest + need <= self.capacity else 0 if need <= oldest else -1
            else:  # wrapped: free between the newest and the oldest
                start = newest if newest + need <= oldest else -1
            if start < 0:
                return None
        token = self._next_token
        self._next_token = token + 1
        at = self._data + start
        memory = self.memory
        _WORD.pack_into(memory, at, 0)  # no token while the payload is written
        memory[at + _SLOT_HEAD.size:at + _SLOT_HEAD.size + size] = payload
        _SLOT_HEAD.pack_into(memory, at, token, size)
        slot = [start, start + need, True]  # start, end, live
        ring.append(slot)
        self._slots[token] = slot
        return ArenaRef(self.worker, start, size, token)

    def release(self, ref: ArenaRef) -> None:
        """The owner is done with ``ref``'s slot (answered, or gone)."""
        slot = self._slots.pop(ref.token, None)
        if slot is None:
            return
        slot[2] = False
        ring = self._ring
        while ring and not ring[0][2]:
            ring.popleft()


class RefusedPayload(Exception):
    """A reference to a slot that no longer holds what it named."""


class ArenaReceiver:
    """Any worker's side: payloads copied out of every region."""

    def __init__(self, arena: PayloadArena):
        self.memory = arena.memory
        self.workers = arena.workers
        self.region_bytes = arena.region_bytes
        self._view = memoryview(arena.memory)

    def view(self, ref: ArenaRef) -> memoryview:
        """The payload ``ref`` names, where it lies in shared memory (no copy);
        RefusedPayload when the slot was rewritten (its sender restarted) or the
        reference is not one.  What is read through it counts only once
        ``unchanged(ref)`` says so afterwards; it is never written to."""
        worker, offset, size, token = ref
        if not 0 <= worker < self.workers or offset < 0 or size < 0 or offset % 8:
            raise RefusedPayload(f"no such slot: {ref}")
        base = worker * self.region_bytes
        at = base + _HEADER + offset
        end = at + _SLOT_HEAD.size + size
        if end > base + self.region_bytes:
            raise RefusedPayload(f"no such slot: {ref}")
        if not self._holds(base, at, token, size):
            raise RefusedPayload(f"slot {offset} of worker {worker} was rewritten")
        return self._view[at + _SLOT_HEAD.size:end]

    def unchanged(self, ref: ArenaRef) -> bool:
        """Whether ``ref``'s slot still holds what ``view`` found there: true
        means everything read through the view since was the payload, whole."""
        base = ref.worker * self.region_bytes
        return self._holds(base, base + _HEADER + ref.offset, ref.token, ref.size)

    def _holds(self, base: int, at: int, token: int, size: int) -> bool:
        memory = self.memory
        return (_WORD.unpack_from(memory, base)[0] == token >> _TOKEN_BITS
                and _SLOT_HEAD.unpack_from(memory, at) == (token, size))
