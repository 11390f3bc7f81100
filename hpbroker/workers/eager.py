"""Run a coroutine at once, in the caller's turn of the loop, and only if it
has to wait hand the rest of it to a task (what Python 3.12 calls an eager
task, for the 3.11 this broker runs on).

A connection's request usually finishes without waiting for anything: the
partition is this worker's, the answer fits the socket.  Queued for a task,
it costs a future, a wake-up and one more turn of the loop (an ``epoll_wait``
of its own); started where its bytes arrived, none of that.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def all_of(awaitables: list[Awaitable[T]]) -> list[T]:
    """Their results, in order: ``asyncio.gather`` makes a task per awaitable,
    which for the usual one (one owner, one partition) is a task and a turn
    of the loop for nothing, so one is awaited as it is."""
    if len(awaitables) == 1:
        return [await awaitables[0]]
    return list(await asyncio.gather(*awaitables))


def start(coro: Coroutine, context: contextvars.Context) -> tuple[Any, asyncio.Task | None]:
    """``(result, None)`` when ``coro`` ran to its end in ``context`` without
    waiting; ``(None, task)`` when it waits, the task carrying it on (in the
    same context) and giving its result.  Its exception, if it raises before
    waiting, is raised here."""
    try:
        waits_on = context.run(coro.send, None)
    except StopIteration as stop:
        return stop.value, None
    task = asyncio.get_running_loop().create_task(_carry_on(coro, waits_on), context=context)
    return None, task


async def _carry_on(coro: Coroutine, waits_on) -> Any:
    return await _Suspended(coro, waits_on)


class _Suspended:
    """A started coroutine and what it waits on: awaiting this waits on that,
    then resumes the coroutine (a cancellation is passed in to it)."""

    __slots__ = ("coro", "waits_on")

    def __init__(self, coro: Coroutine, waits_on):
        self.coro = coro
        self.waits_on = waits_on

    def __await__(self):
        coro, waits_on = self.coro, self.waits_on
        while True:
            try:
                yield waits_on  # the future the coroutine yielded (or None: it yields its turn)
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task (cancellation): the coroutine's to handle
                try:
                    waits_on = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                waits_on = coro.send(None)
            except StopIteration as stop:
                return stop.value
