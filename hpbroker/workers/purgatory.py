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

All of it runs on the owning worker's event loop: no locks.
"""

from __future__ import annotations

import asyncio
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


class Purgatory:
    def __init__(self):
        self._watching: dict[Key, list[_Waiting]] = {}

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

    def poke(self, key: Key) -> None:
        """``key``'s partition changed: complete the operations whose condition holds now."""
        for waiting in self._watching.get(key, ()):
            if not waiting.future.done() and waiting.condition():
                waiting.future.set_result(True)

    def watched(self, key: Key) -> int:
        """How many operations wait on ``key`` (for tests and metrics)."""
        return len(self._watching.get(key, ()))
