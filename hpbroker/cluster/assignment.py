"""Where a new topic's replicas go: Kafka's spread, with racks when brokers have them.

Without racks, partition p's first replica (its preferred leader) is broker
``(start + p) mod n`` of the sorted live brokers, so leaders go round the
brokers; the followers come after it at a gap that grows by one every n
partitions, so that the followers of one broker's leaders land on different
brokers rather than always on the same neighbour.

With racks (every broker has ``broker.rack``) the brokers are first listed
alternating racks (r1, r2, r3, r1, ...); the replicas of a partition then
cover as many racks as they can before any rack holds two, so losing one rack
loses at most the share a rack must hold.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import cast


class AssignmentError(ValueError):
    """The request cannot be met with the brokers there are (Kafka answers INVALID_REPLICATION_FACTOR)."""


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int, *,
                    first_partition: int = 0, start: int | None = None, shift: int | None = None,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Partition -> replica broker ids for ``partitions`` new partitions,
    numbered from ``first_partition`` (CreatePartitions adds to a topic).

    ``brokers`` maps each live broker id to its rack (None when unset)."""
    if replication_factor < 1:
        raise AssignmentError(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > len(brokers):
        raise AssignmentError(f"replication factor {replication_factor} is larger than the "
                              f"{len(brokers)} available broker(s)")
    racks = {rack for rack in brokers.values()}
    if None in racks and len(racks) > 1:
        raise AssignmentError("some brokers have broker.rack and some do not: set it on all or none")
    rng = rng or random.Random()
    if None in racks or len(racks) == 1:
        order = sorted(brokers)
    else:
        order = _alternating_racks(brokers)
    n = len(order)
    start = rng.randrange(n) if start is None else start
    shift = rng.randrange(n) if shift is None else shift
    assignment = {}
    for i in range(partitions):
        p = first_partition + i
        if p > 0 and p % n == 0:
            shift += 1  # a new round of leaders: followers move one further out
        first = (p + start) % n
        followers = [(first + 1 + (shift + j) % (n - 1)) % n for j in range(replication_factor - 1)] if n > 1 else []
        candidates = [order[first]] + [order[f] for f in followers]
        if len(racks) > 1 and None not in racks:
            candidates = _spread_over_racks(order, first, candidates, brokers, replication_factor)
        assignment[p] = candidates
    return assignment


def _alternating_racks(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers listed one per rack in turn: racks sorted, brokers sorted within each
    (every broker has a rack here)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(brokers.items()):
        by_rack.setdefault(cast(str, rack), []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[row] for row in range(max(map(len, columns))) for column in columns if row < len(column)]


def _spread_over_racks(order: list[int], first: int, candidates: list[int], brokers: Mapping[int, str | None],
                       replication_factor: int) -> list[int]:
    """Keep the leader; choose followers walking the rack-alternated list so no
    rack holds a second replica before every rack holds one."""
    chosen = [candidates[0]]
    rack_count = len(set(brokers.values()))
    step = 1
    while len(chosen) < replication_factor:
        broker = order[(first + step) % len(order)]
        step += 1
        if broker in chosen:
            continue
        used = {brokers[b] for b in chosen}
        if brokers[broker] in used and len(used) < rack_count and step <= 2 * len(order):
            continue
        chosen.append(broker)
    return chosen


def check_explicit(assignment: dict[int, list[int]], live: set[int]) -> None:
    """A CreateTopics request's own assignment: partitions 0..n-1, one replication
    factor, no broker twice in a partition, every broker known."""
    if sorted(assignment) != list(range(len(assignment))):
        raise AssignmentError(f"assignment partitions must be 0..{len(assignment) - 1}, got {sorted(assignment)}")
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise AssignmentError("every partition of an assignment must have the same, non-zero number of replicas")
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise AssignmentError(f"partition {p} names a broker twice: {replicas}")
        unknown = set(replicas) - live
        if unknown:
            raise AssignmentError(f"partition {p} names unknown broker(s) {sorted(unknown)}")
