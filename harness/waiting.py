"""Waiting on a condition, the one way tests and benchmarks do it.

A test waits for something it can observe (a broker answers, a znode says who
leads, a member holds its partitions), never for a length of time: poll the
condition and fail naming what did not happen.

* ``wait_for(condition, timeout, what)``: from a plain thread, polling every
  ``interval`` seconds of wall time (0: no pause, for a condition that blocks
  for a while itself, such as a consumer's poll).
* ``await until(condition, what)``: the same on a running event loop, so the
  tasks that make the condition true run between the polls.
* ``await until(condition, what, turns=n)``: no wall time at all, the loop is
  given ``n`` turns (``asyncio.sleep(0)``) at the most.  This is for tests on
  a fake clock: there time moves only when the test advances it, so the only
  thing to wait for is the loop running the tasks already woken, and a
  deadline in seconds would depend on how fast the machine is (and let a test
  that should fail hang for that long).

Each returns the condition's truthy value and raises ``TimeoutError`` naming
``what`` when it does not come.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

UNTIL_TIMEOUT_S = 20.0


def wait_for(condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll ``condition`` until it returns something truthy and return that;
    ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    for _ in _seconds(timeout, what, time.monotonic):
        if value := condition():
            return value
        time.sleep(interval)
    raise AssertionError("unreachable: _seconds raises TimeoutError")


async def until(condition: Callable[[], T | None], what: str, timeout: float = UNTIL_TIMEOUT_S, interval: float = 0.02,
                turns: int | None = None) -> T:
    """``wait_for`` on the running loop: poll ``condition`` until it returns
    something truthy, sleeping ``interval`` seconds between polls, for
    ``timeout`` seconds; or, given ``turns``, yield to the loop that many times
    at the most and never sleep (for fake clocks: see the module docstring)."""
    if turns is None:
        tries, pause = _seconds(timeout, what, asyncio.get_running_loop().time), interval
    else:
        tries, pause = _turns(turns, what), 0
    for _ in tries:
        if value := condition():
            return value
        await asyncio.sleep(pause)
    raise AssertionError("unreachable: _seconds and _turns raise TimeoutError")


def _seconds(timeout: float, what: str, now: Callable[[], float]):
    """One try at once, then one more after each pause while ``now()`` is short
    of the deadline; then ``TimeoutError`` naming ``what``."""
    deadline = now() + timeout
    yield
    while now() < deadline:
        yield
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def _turns(turns: int, what: str):
    yield from range(turns)
    raise TimeoutError(f"gave up after {turns} turns of the event loop waiting for {what}")
