"""Which worker owns a partition or a group: the single writer for it.

A stable hash, so every worker (and a restarted one) computes the same owner
without asking anybody.  Partitions of one topic go to consecutive workers, so
a topic with as many partitions as there are workers spreads over all of them.
"""

import zlib


def partition_owner(topic: str, partition: int, workers: int) -> int:
    return (zlib.crc32(topic.encode()) + partition) % workers


def group_owner(group: str, workers: int) -> int:
    return zlib.crc32(group.encode()) % workers
