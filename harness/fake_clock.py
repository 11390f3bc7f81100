"""A clock for state that arms timers (``hpbroker.clock.Clock``) whose time
moves only when a test says so: timeouts fire at exact instants, in order,
and no test sleeps through them."""

import asyncio
import heapq
import itertools

START_MS = 1_700_000_000_000


async def settle():
    """Give every ready task its turn (a task woken by a future needs one)."""
    for _ in range(20):
        await asyncio.sleep(0)


class FakeTimer:
    def __init__(self, when: int, callback, args):
        self.when, self.callback, self.args, self.cancelled = when, callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A group clock whose time moves only in ``advance``, which fires the
    timers it passes in deadline order (ties in the order they were armed,
    as the loop does) and lets the woken tasks run after each."""

    def __init__(self, now: int = START_MS):
        self.now = now
        self.timers: list = []
        self.seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000

    def call_later(self, delay_ms: int, callback, *args) -> FakeTimer:
        timer = FakeTimer(self.now + delay_ms, callback, args)
        heapq.heappush(self.timers, (timer.when, next(self.seq), timer))
        return timer

    async def advance(self, ms: int) -> None:
        target = self.now + ms
        await settle()
        while self.timers and self.timers[0][0] <= target:
            when, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                self.now = when
                timer.callback(*timer.args)
                await settle()
        self.now = target
        await settle()
