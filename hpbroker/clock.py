"""Time, one way for the whole broker.

* Pure state takes the time as an argument (``now_ms``), so its tests set it
  (``replication/isr.py``, the producer state, the cleaner's plan).
* Objects that read the time or arm timers take a ``Clock`` (``SYSTEM`` when
  live), so their tests pass a clock they move by hand; nothing monkeypatches
  ``time``.

Wall-clock milliseconds are Kafka's unit for every timestamp it stores or
sends; ``monotonic`` seconds measure durations (a pause, a lag), which a
wall-clock step must not distort.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    def call_later(self, delay_ms: int, callback: Callable[..., None], *args) -> Timer: ...


class SystemClock:
    """The live clock: the system's wall and monotonic clocks, the running loop's timers."""

    now_ms = staticmethod(now_ms)
    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def call_later(delay_ms: int, callback: Callable[..., None], *args) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback, *args)


SYSTEM = SystemClock()
