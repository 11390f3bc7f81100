"""How busy each worker has been of late, for the others to read.

Each worker writes only its own slots: the CPU its process used over its
last heartbeat interval, as a share of one core, and how idle the core it is
pinned to was (-1 when it is not pinned to one), so no slot has two writers.
A reader may see figures an interval old, which is all a placement heuristic
needs.  One more slot holds until when (``time.monotonic``, the same clock
in every process) gathering is held off after a gathered worker spread its
load out; any worker may write it, and two writing at once write about the
same time.
"""

import numpy as np

from hpbroker.shared.region import anonymous


class WorkerLoads:
    def __init__(self, workers: int):
        self.workers = workers
        self._memory = anonymous((2 * workers + 1) * 8)
        slots = np.frombuffer(self._memory, np.float64, 2 * workers + 1)
        self._shares = slots[:workers]
        self._idle = slots[workers:2 * workers]
        self._idle[:] = -1.0
        self._held_until = slots[2 * workers:]

    def publish(self, worker: int, share: float, core_idle: float = -1.0) -> None:
        self._shares[worker] = share
        self._idle[worker] = core_idle

    def share(self, worker: int) -> float:
        return float(self._shares[worker])

    def core_idle(self, worker: int) -> float:
        """The idle share of the core ``worker`` is pinned to; -1: not pinned, or not known yet."""
        return float(self._idle[worker])

    def total(self) -> float:
        """Every worker's share together: how many cores the broker keeps busy."""
        return float(self._shares.sum())

    def hold(self, until: float) -> None:
        self._held_until[0] = until

    def held_until(self) -> float:
        return float(self._held_until[0])
