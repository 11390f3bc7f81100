"""Incremental splitter for Kafka's size-prefixed frames.

Every Kafka request and response is a frame: an int32 big-endian size followed by
that many bytes. ``FrameSplitter.feed`` takes whatever a socket read returned and
gives back the complete frames (without their size prefix) it now holds; a
partial frame stays buffered until the next feed. A short read is not an error.

A size that is negative or above ``socket.request.max.bytes`` (Kafka default
104857600) raises ``FrameTooLarge``: the stream cannot be resynchronised, so the
server closes the connection and logs it, as Kafka does. The splitter then stays
failed, so a caller that ignores the exception cannot read garbage as frames.
"""

from __future__ import annotations

import struct

from .exceptions import FrameTooLarge

DEFAULT_MAX_REQUEST_BYTES = 104857600  # Kafka's socket.request.max.bytes default
SIZE_PREFIX = 4

_size = struct.Struct(">i")


class FrameSplitter:
    """Turns a byte stream into frames.

    Frames are returned as memoryviews over immutable ``bytes`` (either the object
    passed to ``feed`` when it was ``bytes`` and nothing was buffered, or a private
    copy), so they stay valid whatever the caller does with its receive buffers.
    """

    __slots__ = ("max_frame_bytes", "_pending", "_needed", "_failed")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._pending = bytearray()
        # Bytes the pending buffer must hold before another frame can complete;
        # saves rescanning (and copying) a large frame on every small read.
        self._needed = SIZE_PREFIX
        self._failed: FrameTooLarge | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that is not complete yet."""
        return len(self._pending)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add ``data`` and return every frame completed by it, in order."""
        if self._failed is not None:
            raise self._failed
        if self._pending:
            self._pending += data
            if len(self._pending) < self._needed:
                return []
            chunk = bytes(self._pending)
            self._pending.clear()
        else:
            chunk = data if type(data) is bytes else bytes(data)
        return self._split(chunk)

    def _split(self, chunk: bytes) -> list[memoryview]:
        view = memoryview(chunk)
        end = len(chunk)
        pos = 0
        frames = []
        while end - pos >= SIZE_PREFIX:
            (size,) = _size.unpack_from(chunk, pos)
            if size < 0 or size > self.max_frame_bytes:
                self._failed = FrameTooLarge(size, self.max_frame_bytes)
                self._pending.clear()
                raise self._failed
            stop = pos + SIZE_PREFIX + size
            if stop > end:
                break
            frames.append(view[pos + SIZE_PREFIX:stop])
            pos = stop
        if pos < end:
            self._pending += view[pos:]
            if end - pos >= SIZE_PREFIX:
                self._needed = SIZE_PREFIX + _size.unpack_from(chunk, pos)[0]
            else:
                self._needed = SIZE_PREFIX
        else:
            self._needed = SIZE_PREFIX
        return frames


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size (mostly for tests and small replies)."""
    return _size.pack(len(payload)) + bytes(payload)
