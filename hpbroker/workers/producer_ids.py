"""Producer ids for InitProducerId, unique across workers and restarts.

Each worker reserves a block of ids at a time by advancing a counter file at
the root of the first log dir under a lock (as Kafka's controller hands out
blocks to brokers); ids of a block a worker did not use before a restart are
skipped, never reused.

Both allocators (``ProducerIdAllocator`` here, ``ClusterProducerIds`` in a
cluster) hand out ids with ``await allocate()``.
"""

import asyncio
import fcntl
import os

from hpbroker.storage import checkpoints

BLOCK_SIZE = 1000
COUNTER_FILE = "hpbroker-producer-id-block"


class ProducerIdAllocator:
    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, COUNTER_FILE)
        self._next = self._end = 0

    async def allocate(self) -> int:
        if self._next >= self._end:
            self._next = self._reserve()
            self._end = self._next + BLOCK_SIZE
        allocated = self._next
        self._next += 1
        return allocated

    def _reserve(self) -> int:
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                with open(self.path, encoding="ascii") as f:
                    start = int(f.read().strip() or 0)
            except (FileNotFoundError, ValueError):
                start = 0
            checkpoints.write_atomically(self.path, f"{start + BLOCK_SIZE}\n")
            return start
        finally:
            os.close(fd)


class ClusterProducerIds:
    """A cluster's producer ids: blocks reserved in ZooKeeper
    (``/latest_producer_id_block``), so no two brokers, nor two workers of
    one, ever hand out the same id."""

    def __init__(self, link, broker_id: int):
        self.link = link  # SharedLink: its ``admin`` reserves the blocks
        self.broker_id = broker_id
        self._next = self._end = 0
        self._reserving = asyncio.Lock()  # one block reserved at a time, whoever asks meanwhile waits for it

    async def allocate(self) -> int:
        """The next id (AdminError when a block is needed and ZooKeeper does not give one)."""
        async with self._reserving:
            if self._next >= self._end:
                start, last = await self.link.admin.allocate_producer_ids(self.broker_id)
                self._next, self._end = start, last + 1
            allocated = self._next
            self._next += 1
            return allocated
