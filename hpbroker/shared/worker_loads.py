"""How busy each worker has been of late, for the others to read.

Each worker writes only its own slot (the CPU its process used over the last
interval, as a share of one core), so no slot has two writers; a reader may
see a figure an interval old, which is all a placement heuristic needs.
"""

import numpy as np

from hpbroker.shared.region import anonymous


class WorkerLoads:
    def __init__(self, workers: int):
        self.workers = workers
        self._memory = anonymous(workers * 8)
        self._shares = np.frombuffer(self._memory, np.float64, workers)

    def publish(self, worker: int, share: float) -> None:
        self._shares[worker] = share

    def share(self, worker: int) -> float:
        return float(self._shares[worker])

    def total(self) -> float:
        """Every worker's share together: how many cores the broker keeps busy."""
        return float(self._shares.sum())
