"""All the memory one broker's processes share, made in one place: the
acceptor's worker pool, before it forks a worker."""

from __future__ import annotations

from dataclasses import dataclass

from hpbroker.shared.cluster_board import ClusterBoard
from hpbroker.shared.counters import WriterCounters
from hpbroker.shared.partition_moves import PartitionMoves
from hpbroker.shared.partition_table import PartitionTable
from hpbroker.shared.payload_arena import FRAME_BYTES, PayloadArena
from hpbroker.shared.worker_loads import WorkerLoads

PARTITION_SLOTS = 8192  # per worker: 8192 entries of 88 bytes, 704 KiB, touched only as used


@dataclass(frozen=True)
class BrokerMemory:
    partitions: PartitionTable
    topic_changes: WriterCounters  # one slot per worker: bumped after it changed the topics on disk
    payloads: PayloadArena  # records on their way to the worker owning their partition, and large frames
    moves: PartitionMoves  # standalone partitions handed from the worker their hash names to another
    loads: WorkerLoads  # each worker's CPU share of late, for placing connections (``workers/affinity.py``)
    acl_changes: WriterCounters  # one slot per worker: bumped after it rewrote the standalone ACL file
    board: ClusterBoard | None = None  # cluster mode: the cluster image and the session, from the acceptor

    @classmethod
    def create(cls, workers: int, partition_slots: int = PARTITION_SLOTS, cluster: bool = False) -> BrokerMemory:
        return cls(PartitionTable(workers, partition_slots), WriterCounters(workers),
                   PayloadArena(workers, frame_bytes=FRAME_BYTES), PartitionMoves(workers),
                   WorkerLoads(workers), WriterCounters(workers),
                   ClusterBoard(workers) if cluster else None)
