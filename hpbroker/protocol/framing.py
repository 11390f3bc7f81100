"""Kafka's size-prefixed frames, received straight into memory they keep.

Every Kafka request and response is a frame: an int32 big-endian size followed
by that many bytes. ``FrameReader`` serves an ``asyncio.BufferedProtocol``: the
transport receives into the buffer ``get_buffer`` returns, and
``buffer_updated`` gives back the frames (without their size prefix) now
complete. A short read is not an error: a partial frame waits for the next.

Small frames, most requests, come several to a read: they are received into a
scratch buffer of the connection's and each is copied out into its own
bytearray. A frame that does not fit the scratch is received into a buffer
of exactly its size, made once its size prefix is in, so its bytes are copied
once, by the kernel, however many reads it takes. Either way a frame is a
writable memoryview (format ``B``) over memory nothing else uses while any
view of it lives: a handler may keep slices of it and stamp them in place.

Large frames' buffers are kept by the process (``LargeFrameBuffers``) and
given to a later frame once no view of them is left. A new buffer's pages
are fresh to the kernel, and on a virtual machine whose free memory goes
back to the host, fresh to the host too: every 4 KiB of a megabyte produce
request was a page fault inside ``recv``. A kept buffer's pages are already
there. In a worker the buffers are carved from its region of the payload
arena (``share``), so records for another worker's partition are handed
over by reference where they were received, not copied.

A size that is negative or above ``socket.request.max.bytes`` (Kafka default
104857600) raises ``FrameTooLarge``: the stream cannot be resynchronised, so the
server closes the connection and logs it, as Kafka does. The reader then stays
failed, so a caller that ignores the exception cannot read garbage as frames.
Frames completed before the bad size in the same read are still handed back
(they were whole, and a peer may have acted on the ones before them): the
failure is then in ``failed``, which the caller checks once it has handled
them, and the next call raises it.
"""

from __future__ import annotations

import struct
import sys
import threading
from typing import Protocol

import numpy

from .exceptions import FrameTooLarge

DEFAULT_MAX_REQUEST_BYTES = 104857600  # Kafka's socket.request.max.bytes default
SIZE_PREFIX = 4

_size = struct.Struct(">i")


SCRATCH_BYTES = 16384  # per connection; a larger frame gets a buffer of its own size


class LargeFrameBuffers:
    """Buffers for frames larger than a connection's scratch, reused once nothing refers to them.

    A buffer is free when the only references to its array are this object's
    list and the check itself: every memoryview of it holds one (through the
    managed buffer it was made from), and so does anything a handler built on
    one (a numpy view, a slice, a write still queued in a transport). What
    "only" counts to is measured once, on a buffer known free, by the same
    code that checks, so it holds on any CPython. Sizes round up to a power
    of two so one buffer serves frames of similar size. At most
    ``keep_buffers`` buffers and ``keep_bytes`` bytes are kept, each of at
    most ``largest`` bytes; a frame that finds none free and no room gets a
    buffer of its own, freed with it.
    """

    def __init__(self, keep_bytes: int = 32 * 2**20, largest: int = 8 * 2**20, keep_buffers: int = 64) -> None:
        self.keep_bytes = keep_bytes
        self.largest = largest
        self.keep_buffers = keep_buffers
        self._kept: list[numpy.ndarray] = []
        self._lock = threading.Lock()  # FrameReaders of several threads (a loop each) may share it
        self._free_refs = next(_with_refs([numpy.empty(1, numpy.uint8)]))[1]
        self._place: BufferPlace | None = None

    def share(self, place: BufferPlace) -> None:
        """Carve the buffers made from now on from ``place`` (a worker's region
        of the payload arena), and tell it whenever one takes a new frame."""
        self._place = place

    @property
    def kept_bytes(self) -> int:
        return sum(a.nbytes for a in self._kept)

    def take(self, size: int) -> memoryview:
        """A writable view of exactly ``size`` bytes, not zeroed (the kernel fills all of it)."""
        if size <= self.largest:
            capacity = max(1 << (size - 1).bit_length(), SCRATCH_BYTES)
            with self._lock:
                place = self._place
                for buffer, refs in _with_refs(self._kept):  # smallest first
                    if refs == self._free_refs and buffer.nbytes >= capacity:
                        if place is not None:
                            place.renew(buffer)
                        return memoryview(buffer.data)[:size]
                if len(self._kept) < self.keep_buffers and self.kept_bytes + capacity <= self.keep_bytes:
                    carved = None if place is None else place.carve(capacity)
                    buffer = numpy.empty(capacity, numpy.uint8) if carved is None else carved
                    self._kept.append(buffer)
                    self._kept.sort(key=lambda a: a.nbytes)
                    if place is not None:
                        place.renew(buffer)
                    return memoryview(buffer.data)[:size]
        return memoryview(numpy.empty(size, numpy.uint8).data)  # one of its own, freed with the frame


class BufferPlace(Protocol):
    """Where a worker's frame buffers live (``ArenaSender``)."""

    def carve(self, capacity: int) -> numpy.ndarray | None: ...

    def renew(self, buffer: numpy.ndarray) -> None: ...


def _with_refs(buffers: list[numpy.ndarray]):
    """Each buffer with its reference count, taken before anything else here refers to it."""
    for buffer in buffers:
        yield buffer, sys.getrefcount(buffer)


LARGE_FRAMES = LargeFrameBuffers()


class FrameReader:
    """One connection's incoming frames (see above); ``feed`` for bytes received some other way."""

    __slots__ = ("max_frame_bytes", "_scratch", "_view", "_used", "_big", "_filled", "_failed", "_bounded")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES, scratch_bytes: int = SCRATCH_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._scratch = bytearray(scratch_bytes)
        self._view = memoryview(self._scratch)
        self._used = 0  # bytes at the scratch's start: the start of a frame not yet complete
        self._big: memoryview | None = None  # a large frame being received into its own buffer
        self._filled = 0  # how much of it has arrived
        self._failed: FrameTooLarge | None = None
        self._bounded = False  # receive no byte beyond the frame in hand (see ``stop_at_frame_end``)

    @property
    def failed(self) -> FrameTooLarge | None:
        """The bad size that ended the stream, once one has come (see above)."""
        return self._failed

    @property
    def buffered(self) -> int:
        """Bytes received of a frame that is not complete yet."""
        return self._filled + SIZE_PREFIX if self._big is not None else self._used

    @property
    def bounded(self) -> bool:
        return self._bounded

    def stop_at_frame_end(self, on: bool = True) -> None:
        """Receive no further than the end of the frame in hand (or, between
        frames, than the next size prefix), so that the stream can stop at a
        frame boundary with the rest still in the kernel (a connection about to
        be handed to another worker); ``False`` receives freely again."""
        self._bounded = on

    def get_buffer(self) -> memoryview:
        """Where the next receive goes (never empty)."""
        if self._big is not None:
            return self._big[self._filled:]
        used = self._used
        if self._bounded:
            if used < SIZE_PREFIX:
                return self._view[used:SIZE_PREFIX]
            # the size was read and the frame fits the scratch (a larger one is in ``_big``)
            return self._view[used:SIZE_PREFIX + _size.unpack_from(self._scratch, 0)[0]]
        return self._view[used:]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """``nbytes`` were received into the last ``get_buffer``: every frame now complete, in order."""
        if self._failed is not None:
            raise self._failed
        big = self._big
        if big is not None:
            self._filled += nbytes
            if self._filled < len(big):
                return []
            self._big, self._filled = None, 0
            return [big]
        scratch = self._scratch
        end = self._used + nbytes
        pos = 0
        frames = []
        while end - pos >= SIZE_PREFIX:
            size = _size.unpack_from(scratch, pos)[0]
            if size < 0 or size > self.max_frame_bytes:
                self._failed = FrameTooLarge(size, self.max_frame_bytes)
                if frames:
                    return frames  # whole before it: the caller handles them, then sees ``failed``
                raise self._failed
            stop = pos + SIZE_PREFIX + size
            if stop > end:
                if SIZE_PREFIX + size > len(scratch):  # it cannot complete here: a buffer of its own
                    big = self._big = LARGE_FRAMES.take(size)
                    self._filled = end - pos - SIZE_PREFIX
                    big[:self._filled] = self._view[pos + SIZE_PREFIX:end]
                    self._used = 0
                    return frames
                break
            frames.append(memoryview(scratch[pos + SIZE_PREFIX:stop]))  # a copy of its own
            pos = stop
        if pos:  # the incomplete rest moves to the front, where it will fit
            scratch[:end - pos] = scratch[pos:end]
        self._used = end - pos
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """``data`` received some other way (a plain ``Protocol``, a test): the frames it completes."""
        if self._failed is not None:
            raise self._failed
        frames: list[memoryview] = []
        view = memoryview(data)
        while view and self._failed is None:
            buffer = self.get_buffer()
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            view = view[n:]
            try:
                frames += self.buffer_updated(n)
            except FrameTooLarge:
                if not frames:
                    raise
        return frames


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size (mostly for tests and small replies)."""
    return _size.pack(len(payload)) + bytes(payload)
