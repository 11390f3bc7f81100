"""Record payloads on their way from the worker holding a client's connection
to the worker owning the partition: the sender copies the batch into its own
region of shared memory, or names it where it already is there (a large
request is received into the region's frame buffers), and sends a reference
(``ArenaRef``) over the peer channel instead of the bytes; the owner appends
straight from there (its ``write()`` is the only copy out), or copies a small
payload out first (``take``).  The socket, the channel's framing and the
codec never carry the payload.

Region w is written only by worker w (single writer), as a ring of slots:
``[token][size][payload]`` padded to 8 bytes.  A slot is live from ``put``
until the sender learns the owner is done with it (its answer arrived, or
its channel closed), then ``release``d; space is reused oldest first, and an
empty ring starts over at the region's start, so a lightly used region
touches only its first pages.  The owner only reads a slot, never writes it:
what an append stamps (offsets, epoch) goes into a private copy of the
batch's head.

Behind the ring, the region holds the buffers ``LargeFrameBuffers`` receives
large frames into (``carve``): ``[token][capacity][frame]`` each, carved once
and reused; the token is renewed (``renew``) before each new frame lands, and
a buffer is not reused while a reference into it is out (``reference`` holds
the view until ``release``).

Why a reference can be trusted: a slot (or frame buffer) is never rewritten
while live, and a worker that dies and restarts bumps its region's
incarnation (the region's first word) before it writes anything.  Every
rewrite of a slot first clears its token, as a buffer's first renews its.
So the owner reads the incarnation and the token (``view``), reads the
payload, and reads both again (``unchanged``): what it read is kept only
when all four match the reference, so a payload rewritten by a restarted
sender (or a reference that is simply wrong) is refused, never appended
torn.  The log checks ``unchanged`` after its write and before
anyone may read what it wrote, and undoes the write when it fails.  This
relies on x86-64 keeping one process's stores in order, as the partition
table does.
"""

from __future__ import annotations

import collections
import ctypes
import struct
from typing import NamedTuple

import numpy

from hpbroker.shared.region import anonymous

REGION_BYTES = 16 << 20  # per worker, the ring; pages touched only as used
# per worker, for its large frames' buffers: the 32 MiB a worker keeps of them
# (protocol/framing.py) and their heads; a buffer that finds no room is private
FRAME_BYTES = (32 << 20) + (64 << 10)
_HEADER = 64  # the incarnation word, then padding to a cache line
_WORD = struct.Struct("<q")
_SLOT_HEAD = struct.Struct("<qq")  # token, size
_FRAME_HEAD = struct.Struct("<qq")  # token, capacity: before each buffer of received frames
_TOKEN_BITS = 40  # a token is (incarnation << 40) | the slot's number in this incarnation


class ArenaRef(NamedTuple):
    """Where a payload is: the sender's region, the slot's offset in it, the
    payload's size, and the token that slot was written with.  With ``head``
    the payload lies inside a frame the sender received into its frame
    buffers: ``offset`` is then the payload's own, and ``head`` that of its
    buffer's head, which holds the token."""
    worker: int
    offset: int
    size: int
    token: int
    head: int = -1


class PayloadArena:
    """Made by the acceptor before its first fork; a worker takes ``sender(its index)``
    and ``receiver()``.  Each worker's region is its ring (``region_bytes``,
    with the incarnation word) followed by ``frame_bytes`` for the buffers
    its large received frames land in (``ArenaSender.carve``)."""

    def __init__(self, workers: int, region_bytes: int = REGION_BYTES, frame_bytes: int = 0):
        if region_bytes % 16 or region_bytes <= _HEADER:
            raise ValueError(f"region_bytes must be a multiple of 16 above {_HEADER}, got {region_bytes}")
        if frame_bytes % 16 or frame_bytes < 0:
            raise ValueError(f"frame_bytes must be a multiple of 16, got {frame_bytes}")
        self.workers = workers
        self.region_bytes = region_bytes
        self.frame_bytes = frame_bytes
        self.stride = region_bytes + frame_bytes  # from one worker's region to the next
        self.memory = anonymous(workers * self.stride)

    def sender(self, worker: int) -> ArenaSender:
        return ArenaSender(self, worker)

    def receiver(self) -> ArenaReceiver:
        return ArenaReceiver(self)


class ArenaSender:
    """One worker's region, written from its event loop only."""

    def __init__(self, arena: PayloadArena, worker: int):
        self.memory = arena.memory
        self.worker = worker
        self.base = worker * arena.stride
        self.capacity = arena.region_bytes - _HEADER
        self.largest = self.capacity // 4  # a larger payload goes inline: one batch must not starve the rest
        self._data = self.base + _HEADER  # where slot offsets count from
        self._ring: collections.deque[list] = collections.deque()  # [start, end, live], oldest first
        self._slots: dict[int, list] = {}  # token -> its slot
        # the frame buffers: carved once each, after the ring (offsets count from _data too)
        self._carved = self.capacity  # where the next buffer's head goes
        self._frames_end = self.capacity + arena.frame_bytes
        self._carved_buffers: dict[int, tuple[int, int]] = {}  # id(buffer) -> (its head, its capacity)
        self._pins: dict[tuple[int, int], list[memoryview]] = {}  # (token, offset) -> views its owner may read
        self._address = ctypes.addressof(ctypes.c_char.from_buffer(self.memory)) + self._data
        # a worker starting (maybe after its predecessor died with slots in flight):
        # a new incarnation first, so every earlier reference to this region fails
        incarnation = _WORD.unpack_from(self.memory, self.base)[0] + 1
        _WORD.pack_into(self.memory, self.base, incarnation)
        self._next_token = incarnation << _TOKEN_BITS

    @property
    def live(self) -> int:
        """Slots and frame payloads an owner may still read."""
        return len(self._slots) + sum(len(views) for views in self._pins.values())

    # --- frames received into the region ----------------------------------------------------
    def carve(self, capacity: int) -> numpy.ndarray | None:
        """A new buffer of ``capacity`` bytes for received frames (``LargeFrameBuffers``),
        None when the frame area is used up.  Its memory is never given back: the
        buffers are kept and ``renew``ed for every frame."""
        head = self._carved
        end = head + _FRAME_HEAD.size + capacity
        if end > self._frames_end:
            return None
        self._carved = (end + 15) & ~15
        _FRAME_HEAD.pack_into(self.memory, self._data + head, 0, capacity)
        buffer = numpy.frombuffer(self.memory, numpy.uint8, count=capacity,
                                  offset=self._data + head + _FRAME_HEAD.size)
        self._carved_buffers[id(buffer)] = (head, capacity)  # kept for good: the id stays its own
        return buffer

    def renew(self, buffer: numpy.ndarray) -> None:
        """``buffer`` is about to receive a new frame: a new token, before any byte
        of it changes, so every reference into the frame it held fails."""
        carved = self._carved_buffers.get(id(buffer))
        if carved is not None:
            _WORD.pack_into(self.memory, self._data + carved[0], self._next_token)
            self._next_token += 1

    def reference(self, payload) -> ArenaRef | None:
        """A reference to ``payload`` where it lies, when that is in a frame
        buffer of this region (None otherwise: ``put`` copies it).  The payload
        is held (its buffer not renewed) until the reference is released."""
        if not isinstance(payload, memoryview) or payload.readonly or not payload.nbytes:
            return None
        carved = self._carved_buffers.get(id(payload.obj))  # a view's obj is the array it was cut from
        if carved is None:
            return None
        try:
            offset = ctypes.addressof(ctypes.c_char.from_buffer(payload)) - self._address
        except (TypeError, ValueError):  # not one contiguous piece of bytes
            return None
        (head, capacity), size = carved, payload.nbytes
        if offset < head + _FRAME_HEAD.size or offset + size > head + _FRAME_HEAD.size + capacity:
            return None
        token = _WORD.unpack_from(self.memory, self._data + head)[0]
        self._pins.setdefault((token, offset), []).append(payload)
        return ArenaRef(self.worker, offset, size, token, head)

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
        """The owner is done with ``ref``'s slot or frame payload (answered, or gone)."""
        if ref.head >= 0:
            views = self._pins.get((ref.token, ref.offset))
            if views:
                views.pop()
                if not views:
                    del self._pins[(ref.token, ref.offset)]
            return
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
    """Any worker's side: payloads read where they lie in every region."""

    def __init__(self, arena: PayloadArena):
        self.memory = arena.memory
        self.workers = arena.workers
        self.stride = arena.stride
        self.ring_bytes = arena.region_bytes - _HEADER  # where the frame buffers start, from a region's data
        self._view = memoryview(arena.memory)

    def view(self, ref: ArenaRef) -> memoryview:
        """The payload ``ref`` names, where it lies in shared memory (no copy);
        RefusedPayload when its slot or frame buffer was rewritten (its sender
        restarted) or the reference is not one.  What is read through it counts
        only once ``unchanged(ref)`` says so afterwards; it is never written to."""
        worker, offset, size, token, head = ref
        if not 0 <= worker < self.workers or offset < 0 or size < 0:
            raise RefusedPayload(f"no such payload: {ref}")
        base = worker * self.stride
        data = base + _HEADER
        if head < 0:  # a slot of the ring
            at = data + offset + _SLOT_HEAD.size
            if offset % 8 or at + size > data + self.ring_bytes:
                raise RefusedPayload(f"no such slot: {ref}")
            if not self.unchanged(ref):
                raise RefusedPayload(f"slot {offset} of worker {worker} was rewritten")
            return self._view[at:at + size]
        at = data + offset
        if head % 16 or head < self.ring_bytes or offset < head + _FRAME_HEAD.size or at + size > base + self.stride:
            raise RefusedPayload(f"no such frame payload: {ref}")
        capacity = _FRAME_HEAD.unpack_from(self.memory, data + head)[1]
        if offset + size > head + _FRAME_HEAD.size + capacity:
            raise RefusedPayload(f"no such frame payload: {ref}")
        if not self.unchanged(ref):
            raise RefusedPayload(f"the frame buffer at {head} of worker {worker} was rewritten")
        return self._view[at:at + size]

    def take(self, ref: ArenaRef) -> bytearray:
        """A private copy of the payload ``ref`` names (RefusedPayload as ``view``,
        or when it was rewritten while copied)."""
        payload = bytearray(self.view(ref))
        if not self.unchanged(ref):
            raise RefusedPayload(f"the payload of {ref} was rewritten while copied")
        return payload

    def unchanged(self, ref: ArenaRef) -> bool:
        """Whether ``ref``'s slot or frame buffer still holds what ``view`` found
        there: true means everything read through the view since was the
        payload, whole."""
        worker, offset, size, token, head = ref
        memory = self.memory
        base = worker * self.stride
        if _WORD.unpack_from(memory, base)[0] != token >> _TOKEN_BITS:
            return False
        if head < 0:
            return _SLOT_HEAD.unpack_from(memory, base + _HEADER + offset) == (token, size)
        return _WORD.unpack_from(memory, base + _HEADER + head)[0] == token
