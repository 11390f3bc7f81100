"""When connections spread over several workers may gather on one, and when
a worker they gathered on spreads them out again.

Gathering (``affinity.py``: a connection whose writes go to several
workers' partitions moves to the lowest-numbered of them, and the
partitions follow it there) saves the round trips between workers at the
price of cores.  So it happens only while the whole broker is lightly
loaded: every worker publishes the CPU it used over its last heartbeat
interval (``WorkerLoads``), and connections gather only while all of them
together use under ``connection.gather.max.cpu.percent`` of one core.

A load that grew after gathering would be stuck on one core.  So a worker
that stays saturated (``connection.gather.spread.cpu.percent`` of its core,
three heartbeats in a row) while another worker's core is mostly idle
spreads out: it hands every partition that moved to it back to the worker
its hash names, and holds gathering and partition moves off for ``HOLD_S``
across the broker, so the load does not gather again at once.  Meanwhile
each connection that writes several workers' partitions goes to a worker
of its own, chosen by its client port (``affinity.spot_of``).  A
closed-loop benchmark on two cores (the gathered worker saturated, the
other core half busy with the clients) is not that: spread, it would get
no more requests through, and nothing spreads.
"""

from __future__ import annotations

import os
import time

from hpbroker.shared.worker_loads import WorkerLoads

# another worker's core at least this idle: spreading out would gain from it.  Spread, a request costs
# about 1.5 times as much (the crossings), so a second core adds capacity only past half of it idle;
# at three quarters, one core's load spread gets about 1.75 / 1.5 = 1.17 times the requests through
IDLE_ELSEWHERE = 0.75
SATURATED_BEATS = 3  # heartbeats in a row at the spreading share before spreading
HOLD_S = 300.0  # after a spread, no gathering and no partition moves for this long


class Gathering:
    """One worker's view of the broker's load: whether its connections may
    gather, whether it should spread out."""

    def __init__(self, loads: WorkerLoads, index: int, gather_below: float, spread_at: float,
                 clock=time.monotonic):
        self.loads = loads
        self.index = index
        self.gather_below = gather_below  # cores, all workers together
        self.spread_at = spread_at  # share of this worker's core
        self.clock = clock
        self._saturated_beats = 0
        pinned = os.sched_getaffinity(0)
        self._core = CoreIdle(next(iter(pinned))) if len(pinned) == 1 else None
        self._cpu_at: tuple[float, float] | None = None  # process CPU time and clock at the last beat

    def beat(self) -> bool:
        """Each heartbeat: publish this worker's CPU share since the last beat
        and how idle its core was, then whether to spread out now (the first
        beat only starts the count)."""
        cpu, now = time.process_time(), self.clock()
        last, self._cpu_at = self._cpu_at, (cpu, now)
        idle = self._core.share() if self._core is not None else -1.0
        if last is None:
            return False
        self.loads.publish(self.index, (cpu - last[0]) / max(now - last[1], 1e-3), idle)
        return self.due_to_spread()

    def allowed(self) -> bool:
        """Whether a connection spread over workers may gather now."""
        return not self.held() and self.light()

    def light(self) -> bool:
        """Whether all workers together use under ``gather_below`` cores (hold or not)."""
        return self.loads.total() < self.gather_below

    def held(self) -> bool:
        """Whether gathering and partition moves are held off after a spread."""
        return self.clock() < self.loads.held_until()

    def hold(self) -> None:
        self.loads.hold(self.clock() + HOLD_S)

    def due_to_spread(self) -> bool:
        """After this worker published its figures: whether it has been
        saturated long enough, with somewhere to spread to, to spread out now."""
        if self.loads.share(self.index) >= self.spread_at and self._idle_elsewhere():
            self._saturated_beats += 1
        else:
            self._saturated_beats = 0
        if self._saturated_beats < SATURATED_BEATS:
            return False
        self._saturated_beats = 0
        return True

    def _idle_elsewhere(self) -> bool:
        for worker in range(self.loads.workers):
            if worker != self.index:
                idle = self.loads.core_idle(worker)
                if idle < 0:  # not pinned: what the worker itself leaves of a core
                    idle = 1.0 - self.loads.share(worker)
                if idle >= IDLE_ELSEWHERE:
                    return True
        return False


class CoreIdle:
    """How idle one CPU was between two readings of ``/proc/stat``."""

    def __init__(self, cpu: int):
        self.label = f"cpu{cpu} "
        self._last = self._read()

    def _read(self) -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                for line in f:
                    if line.startswith(self.label):
                        ticks = [int(x) for x in line.split()[1:]]
                        return ticks[3] + ticks[4], sum(ticks[:8])  # idle + iowait, all but guest time
        except (OSError, ValueError, IndexError):
            pass
        return None

    def share(self) -> float:
        """The idle share since the last call; -1 when it cannot be read."""
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[1] <= last[1]:
            return -1.0
        return (now[0] - last[0]) / (now[1] - last[1])
