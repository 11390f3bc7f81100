"""The cluster image, published by the acceptor to every worker.

A broker has one ZooKeeper session, the acceptor's.  What the workers need of
it, the image of the cluster and the state of the session, the acceptor
writes here and the workers read: one writer, any number of readers, no lock
between processes.

The mapping holds a header and two halves.  The writer encodes a new image
into the half readers are not told about, then, under a seqlock (a counter
made odd before and even after), points the header at it with the image's
generation, its length and the session's state.  A reader copies the header
and the half it names and keeps the copy only when the counter was even and
unchanged: an image is overwritten only two publications after it was
current, and the first of those already moved the counter.  As with the
partition table, this relies on x86-64's store order.

Besides, the writer renews a deadline on the monotonic clock every process
shares: until when the session may be taken as tracked.  A stopped or hung
acceptor (its kazoo threads with it) lets it run out, and the workers then
doubt their leaderships as they do after a pause of their own.

Each worker has an eventfd the writer signals after each publication, so a
worker's event loop hears of a new image without polling.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import numpy as np

from hpbroker.shared.region import anonymous

HALF_BYTES = 32 << 20  # address space per image; pages are touched only as far as an image reaches
_HEADER = 4096
_SEQ, _GENERATION, _SESSION, _HALF, _LENGTH = range(5)
_READ_TRIES = 1000  # a reader gives up (keeps what it had) after this many torn copies


class ImageTooLarge(Exception):
    """An encoded image does not fit in a half."""


class Published(NamedTuple):
    generation: int
    session: int
    image: bytes | None  # None when the generation is the one the reader already had


class ClusterBoard:
    def __init__(self, workers: int, half_bytes: int = HALF_BYTES):
        self.half_bytes = half_bytes
        self._mapping = anonymous(_HEADER + 2 * half_bytes)
        self._words = np.ndarray((8,), dtype=np.int64, buffer=self._mapping, offset=0)
        self._alive_until = np.ndarray((1,), dtype=np.float64, buffer=self._mapping, offset=64)
        self._view = memoryview(self._mapping)
        self.wakeups = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(workers)]

    # --- the writer (the acceptor) ---------------------------------------------------------
    def publish(self, image: bytes | None, session: int) -> int:
        """Make ``image`` current (None: keep the current one) with ``session``;
        the new generation.  Then every worker is woken."""
        words = self._words
        half = int(words[_HALF])
        length = int(words[_LENGTH])
        if image is not None:
            if len(image) > self.half_bytes:
                raise ImageTooLarge(f"the cluster image takes {len(image)} bytes, above {self.half_bytes}")
            half = 1 - half if words[_GENERATION] else 0
            start = _HEADER + half * self.half_bytes
            self._view[start:start + len(image)] = image
            length = len(image)
        generation = int(words[_GENERATION]) + 1
        words[_SEQ] += 1
        words[_GENERATION] = generation
        words[_SESSION] = session
        words[_HALF] = half
        words[_LENGTH] = length
        words[_SEQ] += 1
        for fd in self.wakeups:
            try:
                os.eventfd_write(fd, 1)
            except OSError:
                pass  # (a counter that would overflow: that worker has wake-ups pending anyway)
        return generation

    def renew(self, until: float) -> None:
        """The session is tracked until ``until`` (``time.monotonic()`` seconds)."""
        self._alive_until[0] = until

    # --- the readers (the workers) -----------------------------------------------------------
    def read(self, known_generation: int = -1) -> Published | None:
        """The current publication (its image only when newer than
        ``known_generation``); None before the first, or when every copy was torn."""
        words = self._words
        for _ in range(_READ_TRIES):
            seq = int(words[_SEQ])
            if seq & 1:
                time.sleep(0)
                continue
            generation = int(words[_GENERATION])
            session = int(words[_SESSION])
            image = None
            if generation != known_generation:
                start = _HEADER + int(words[_HALF]) * self.half_bytes
                length = int(words[_LENGTH])
                image = bytes(self._view[start:start + min(length, self.half_bytes)])
            if int(words[_SEQ]) == seq:
                return None if generation == 0 else Published(generation, session, image)
        return None

    def tracked(self, now: float | None = None) -> bool:
        """The acceptor renewed its deadline and it has not passed."""
        return (time.monotonic() if now is None else now) < float(self._alive_until[0])

    def tracked_until(self) -> float:
        return float(self._alive_until[0])

    @staticmethod
    def drain(fd: int) -> None:
        """Consume a worker's pending wake-ups."""
        try:
            os.eventfd_read(fd)
        except BlockingIOError:
            pass
