"""The range assignment of Kafka's ZooKeeper-coordinated consumers, as a pure
function: each member computes it alone, from the same ZooKeeper view, and
takes its own share.

Per topic: sort the partitions and the consumers subscribed to it; with N the
partitions and C the consumers, consumer i gets the contiguous range starting
at i * (N // C) + min(i, N % C), of N // C partitions, one more for the first
N % C consumers.  Consumers past the N-th get nothing.
"""

from __future__ import annotations


def range_assign(partitions: list[int], consumers: list[str]) -> dict[str, list[int]]:
    """consumer id -> its partitions of one topic (every consumer is a key)."""
    ordered = sorted(partitions)
    members = sorted(consumers)
    if not members:
        return {}
    share, extra = divmod(len(ordered), len(members))
    assigned = {}
    for i, member in enumerate(members):
        start = i * share + min(i, extra)
        assigned[member] = ordered[start:start + share + (1 if i < extra else 0)]
    return assigned

