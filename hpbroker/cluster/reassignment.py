"""A partition reassignment request, checked as Kafka's controller checks it,
and the topic assignment it leads to.

One function serves every way a reassignment arrives: AlterPartitionReassignments
on any broker (a null replica list cancels), ``/admin/reassign_partitions`` read
by the controller, and a standalone broker (one partition on one broker).  The
checks come in Kafka's order, so a request wrong in two ways gets Kafka's
answer: the replica list first (empty, repeated or negative ids, or a replica
to add on a broker that is not live: INVALID_REPLICA_ASSIGNMENT), then a
cancellation with nothing to cancel (NO_REASSIGNMENT_IN_PROGRESS), then a
partition that does not exist (UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from hpbroker.cluster import znodes
from hpbroker.errors import ErrorCode


class Outcome(NamedTuple):
    error: ErrorCode
    message: str | None = None


ACCEPTED = Outcome(ErrorCode.none)


def plan(topic: str, assignment: znodes.TopicAssignment | None, changes: Mapping[int, list[int] | None],
         live: set[int], *, allow_replication_factor_change: bool = True
         ) -> tuple[znodes.TopicAssignment | None, dict[int, Outcome]]:
    """(the assignment to write, or None when nothing changes; each partition's outcome).

    ``assignment`` is None for a topic that does not exist or is being
    deleted; ``changes`` maps partitions to their target replicas, or None to
    cancel an ongoing reassignment (back to the origin replicas)."""
    current = assignment
    outcomes: dict[int, Outcome] = {}
    for partition, target in changes.items():
        exists = current is not None and partition in current.partitions
        if target is not None:
            problem = _invalid(target, current if exists else None, partition, live)
            if problem:
                outcomes[partition] = Outcome(ErrorCode.invalid_replica_assignment, problem)
                continue
        elif current is None or not exists or not znodes.being_reassigned(current, partition):
            outcomes[partition] = Outcome(ErrorCode.no_reassignment_in_progress,
                                          f"no reassignment of {topic}-{partition} is in progress")
            continue
        if current is None or not exists:
            outcomes[partition] = Outcome(ErrorCode.unknown_topic_or_partition,
                                          f"partition {topic}-{partition} does not exist")
            continue
        origin = znodes.origin_replicas(current, partition)
        if target is None:
            target = origin
        elif not allow_replication_factor_change and len(target) != len(origin):
            outcomes[partition] = Outcome(ErrorCode.invalid_replication_factor,
                                          f"the request does not allow changing {topic}-{partition}'s replication "
                                          f"factor {len(origin)} to {len(target)}")
            continue
        current = znodes.reassigned(current, partition, list(target))
        outcomes[partition] = ACCEPTED
    return (current if current != assignment else None), outcomes


def _invalid(target: list[int], assignment: znodes.TopicAssignment | None, partition: int,
             live: set[int]) -> str | None:
    if not target:
        return "the replica list is empty (a null list cancels a reassignment)"
    if len(set(target)) != len(target):
        return f"the replica list {list(target)} names a broker twice"
    if any(r < 0 for r in target):
        return f"the replica list {list(target)} has a negative broker id"
    origin = znodes.origin_replicas(assignment, partition) if assignment is not None else []
    missing = sorted(r for r in target if r not in origin and r not in live)
    if missing:
        return f"broker(s) {missing} to add are not live"
    return None


class OngoingReassignment(NamedTuple):
    """ListPartitionReassignments, one partition: its replicas now (target then
    origin), and those being added and removed."""
    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]


def ongoing(assignment: znodes.TopicAssignment, partitions=None) -> list[OngoingReassignment]:
    """The reassignments under way in ``assignment`` (of ``partitions`` only, when given)."""
    return [OngoingReassignment(assignment.topic, p, list(replicas), list(assignment.adding_replicas.get(p, [])),
                                list(assignment.removing_replicas.get(p, [])))
            for p, replicas in sorted(assignment.partitions.items())
            if znodes.being_reassigned(assignment, p) and (partitions is None or p in partitions)]
