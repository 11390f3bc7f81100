"""Delayed operations: requests that wait on a partition's progress.

Three kinds wait (Kafka's DelayedFetch, DelayedProduce, DelayedDeleteRecords):
a fetch long poll until data beyond its offset exists, an acks=all produce
until the high watermark passes its batch, a DeleteRecords until every
in-sync replica has moved its log start.  Each names the partitions it
watches and a condition; whoever changes a partition (an append, a new high
watermark, a follower's fetch, a role change, a deletion) pokes it, and the
operations watching it check their condition again.  An operation completes
when its condition holds or its time is up; the caller then reads the
outcome from the partition itself, so a waiter never carries stale state.

Acks=all produces are many per partition (a client keeps dozens of requests
in flight while the followers catch up) and every append, follower fetch and
high watermark move pokes them, so they do not each carry a condition: they
wait in an ``OffsetQueue``, by the offset the high watermark must reach, and
a poke reads the high watermark once and answers the ones it passed.  What
ends them all at once (the partition no longer led here under the epoch
they began in, an fsync that failed) is looked at once per poke too.

All of it runs on the owning worker's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterable

Key = tuple[str, int]


class _Waiting:
    __slots__ = ("condition", "future")

    def __init__(self, condition: Callable[[], bool], future: asyncio.Future):
        self.condition = condition
        self.future = future


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)


class OffsetQueue:
    """The waiters on one key for a level (a partition's high watermark) to
    reach their offsets, all begun under one ``token`` (the leader epoch):
    a heap by offset, so a poke answers those the level passed and looks at
    no other.  ``holds()`` false (the partition is no longer led here under
    that epoch) answers every waiter; ``failing()`` true (an fsync failed)
    makes a poke ask ``failed(offset)`` of each."""

    def __init__(self, token, level: Callable[[], int], holds: Callable[[], bool],
                 failing: Callable[[], bool], failed: Callable[[int], bool]):
        self.token = token
        self.level, self.holds, self.failing, self.failed = level, holds, failing, failed
        self.heap: list[tuple[int, int, asyncio.Future]] = []  # (offset, arrival, its future)
        self.waiting = 0  # waiters not yet ended (answered ones may still be in the heap)

    def settle(self) -> None:
        heap = self.heap
        if not heap:
            return
        if not self.holds():
            self.answer_all()
            return
        if self.failing():
            for offset, _, future in heap:
                if not future.done() and self.failed(offset):
                    future.set_result(True)
        level = self.level()
        while heap and heap[0][0] <= level:
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_result(True)

    def answer_all(self) -> None:
        for _, _, future in self.heap:
            if not future.done():
                future.set_result(True)
        self.heap.clear()


class Purgatory:
    def __init__(self):
        self._watching: dict[Key, list[_Waiting]] = {}
        self._offsets: dict[Key, OffsetQueue] = {}
        self._arrivals = itertools.count()  # orders waiters on the same offset

    async def wait(self, keys: Iterable[Key], condition: Callable[[], bool], timeout_s: float) -> bool:
        """Until ``condition()`` holds (checked now and at each poke of ``keys``);
        True if it did, False when ``timeout_s`` passed first."""
        if condition():
            return True
        keys = list(keys)
        if timeout_s <= 0 or not keys:
            return False
        loop = asyncio.get_running_loop()
        waiting = _Waiting(condition, loop.create_future())
        for key in keys:
            self._watching.setdefault(key, []).append(waiting)
        # a timer on the future itself: asyncio.wait_for would add a second future and two callbacks
        expiry = loop.call_later(timeout_s, _expire, waiting.future)
        try:
            return await waiting.future
        finally:
            expiry.cancel()
            for key in keys:
                watchers = self._watching.get(key)
                if watchers is not None:
                    watchers[:] = [w for w in watchers if w is not waiting]
                    if not watchers:
                        del self._watching[key]

    async def wait_for_offset(self, key: Key, offset: int, timeout_s: float, token,
                              level: Callable[[], int], holds: Callable[[], bool],
                              failing: Callable[[], bool], failed: Callable[[int], bool]) -> bool:
        """Until ``level()`` reaches ``offset``, ``holds()`` stops holding or
        ``failed(offset)`` (while ``failing()``): True, and the caller reads
        which; False when ``timeout_s`` passed first.  Waiters on ``key`` share
        one ``OffsetQueue`` per ``token``, made with the first one's functions:
        a waiter with a new token answers the ones left under the old."""
        if level() >= offset or not holds() or (failing() and failed(offset)):
            return True
        if timeout_s <= 0:
            return False
        queue = self._offsets.get(key)
        if queue is None or queue.token != token:
            if queue is not None:
                queue.answer_all()
            queue = self._offsets[key] = OffsetQueue(token, level, holds, failing, failed)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        heapq.heappush(queue.heap, (offset, next(self._arrivals), future))
        queue.waiting += 1
        expiry = loop.call_later(timeout_s, _expire, future)
        try:
            return await future
        finally:
            expiry.cancel()
            queue.waiting -= 1
            if not queue.waiting and self._offsets.get(key) is queue:
                del self._offsets[key]  # with whatever timed-out entries it still held

    def poke(self, key: Key) -> None:
        """``key``'s partition changed: complete the operations whose condition holds now."""
        for waiting in self._watching.get(key, ()):
            if not waiting.future.done() and waiting.condition():
                waiting.future.set_result(True)
        queue = self._offsets.get(key)
        if queue is not None:
            queue.settle()

    def watched(self, key: Key) -> int:
        """How many operations wait on ``key`` (for tests and metrics)."""
        queue = self._offsets.get(key)
        return len(self._watching.get(key, ())) + (queue.waiting if queue is not None else 0)
