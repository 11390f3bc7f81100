"""The server-side assignors of the consumer group protocol (KIP-848): the
coordinator, not a member, decides who reads what.

Each takes the members' subscriptions (member id -> topic ids), the
partition count of every subscribed topic, and the last target assignment
(member id -> topic id -> partitions), and returns the new target for every
member.  ``uniform`` (Kafka's default) spreads the partitions of all topics
evenly and keeps a partition where it was whenever the balance allows, so a
member joining or leaving moves as few partitions as it can.  ``range``
gives each member of a topic's subscribers a contiguous run of its
partitions, members in id order, so that topics with as many partitions are
split alike (co-partitioned joins).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

Assignment = dict[uuid.UUID, set[int]]

DEFAULT = "uniform"


def uniform(subscriptions: Mapping[str, set[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
            previous: Mapping[str, Mapping[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    owner: dict[tuple[uuid.UUID, int], str] = {}
    counts = {m: 0 for m in subscriptions}
    # sticky: a partition stays with its last owner while that owner still subscribes to its topic
    for member in sorted(previous):
        topics = subscriptions.get(member)
        if topics is None:
            continue
        for topic_id, owned in previous[member].items():
            if topic_id not in topics:
                continue
            for p in owned:
                if p < partitions.get(topic_id, 0) and (topic_id, p) not in owner:
                    owner[(topic_id, p)] = member
                    counts[member] += 1
    eligible = {t: sorted(m for m, topics in subscriptions.items() if t in topics) for t in partitions}
    # the rest go, one at a time, to the least loaded member that may read them
    for topic_id in sorted(partitions):
        members = eligible[topic_id]
        if not members:
            continue
        for p in range(partitions[topic_id]):
            if (topic_id, p) not in owner:
                chosen = min(members, key=lambda m: (counts[m], m))
                owner[(topic_id, p)] = chosen
                counts[chosen] += 1
    _balance(owner, counts, eligible)
    result: dict[str, Assignment] = {m: {} for m in subscriptions}
    for (topic_id, p), member in owner.items():
        result[member].setdefault(topic_id, set()).add(p)
    return result


def _balance(owner: dict[tuple[uuid.UUID, int], str], counts: dict[str, int],
             eligible: Mapping[uuid.UUID, list[str]]) -> None:
    """Move partitions from a member holding two or more than another member
    that could read them, until no such move is left: the kept partitions of
    the sticky pass may leave a joiner with nothing."""
    moved = True
    while moved:
        moved = False
        for key in sorted(owner, key=lambda k: (k[0].bytes, k[1])):
            holder = owner[key]
            target = min(eligible[key[0]], key=lambda m: (counts[m], m))
            if counts[holder] - counts[target] >= 2:
                owner[key] = target
                counts[holder] -= 1
                counts[target] += 1
                moved = True


def range_(subscriptions: Mapping[str, set[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
           previous: Mapping[str, Mapping[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    result: dict[str, Assignment] = {m: {} for m in subscriptions}
    for topic_id, count in partitions.items():
        members = sorted(m for m, topics in subscriptions.items() if topic_id in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            if size:
                result[member][topic_id] = set(range(start, start + size))
            start += size
    return result


ASSIGNORS = {"uniform": uniform, "range": range_}
