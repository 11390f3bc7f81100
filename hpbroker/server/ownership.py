"""Which worker owns a partition or a group: the single writer for it.

A stable hash, so every worker (and a restarted one) computes the same owner
without asking anybody.  Partitions of one topic go to consecutive workers, so
a topic with as many partitions as there are workers spreads over all of them.

A consumer group belongs to the partition of ``__consumer_offsets`` that Kafka
would put it in (``abs(groupId.hashCode()) % offsets.topic.num.partitions``,
Java's String hash), and so to that partition's owner: the coordinator appends
the group's records to a log it owns, and a directory moved between Kafka and
hpbroker keeps every group in the partition it was written to.  A
transactional id belongs to its ``__transaction_state`` partition the same way.
"""

import functools
import zlib

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions
TRANSACTION_TOPIC = "__transaction_state"
DEFAULT_TRANSACTION_PARTITIONS = 50  # transaction.state.log.num.partitions


def partition_owner(topic: str, partition: int, workers: int) -> int:
    return (zlib.crc32(topic.encode()) + partition) % workers


@functools.lru_cache(maxsize=1 << 16)  # every group and transactional call hashes its id: a loop in Python
def java_string_hash(text: str) -> int:
    """``String.hashCode()``: s[0]*31^(n-1) + ... over UTF-16 code units, in int32."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def group_partition(group: str, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """Kafka's ``partitionFor(groupId)``; its ``Utils.abs`` maps Integer.MIN_VALUE to 0."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def group_owner(group: str, workers: int, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    return partition_owner(OFFSETS_TOPIC, group_partition(group, partitions), workers)


def txn_partition(transactional_id: str, partitions: int = DEFAULT_TRANSACTION_PARTITIONS) -> int:
    """Kafka's ``partitionFor(transactionalId)``: the same hash as a group's."""
    return group_partition(transactional_id, partitions)


def txn_owner(transactional_id: str, workers: int, partitions: int = DEFAULT_TRANSACTION_PARTITIONS) -> int:
    return partition_owner(TRANSACTION_TOPIC, txn_partition(transactional_id, partitions), workers)
