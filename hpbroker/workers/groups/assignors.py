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
from collections import deque
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
    # the rest go, one at a time, to the least loaded member that may read them; the topics
    # with the fewest readers first, as the others have more places to go
    for topic_id in sorted(partitions, key=lambda t: (len(eligible[t]), t.bytes)):
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
    """While some member holds two or more partitions than another it can pass
    work to, pass it: one partition along each step of the shortest chain of
    members (a to b to c: a partition of a that b reads, one of b that c
    reads), so each member in between keeps its count.  The kept partitions
    of the sticky pass may leave a joiner with nothing, and members that read
    different topics may need such chains.  Each pass lowers the sum of the
    squared counts, so it ends."""
    while True:
        path = _chain(owner, counts, eligible)
        if path is None:
            return
        for key, to in path:
            counts[owner[key]] -= 1
            counts[to] += 1
            owner[key] = to


def _chain(owner, counts, eligible) -> list[tuple[tuple[uuid.UUID, int], str]] | None:
    """(partition, its next member) steps from a loaded member to one with two fewer, or None."""
    if not counts:
        return None
    held: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in counts}
    for key, member in owner.items():
        held[member].append(key)
    lightest = min(counts.values())
    for start in sorted(counts, key=lambda m: (-counts[m], m)):
        if counts[start] - lightest < 2:
            return None
        came_from: dict[str, tuple[str, tuple[uuid.UUID, int]] | None] = {start: None}
        queue = deque([start])
        while queue:
            member = queue.popleft()
            for key in held[member]:
                for reader in eligible[key[0]]:
                    if reader in came_from:
                        continue
                    came_from[reader] = (member, key)
                    if counts[reader] <= counts[start] - 2:
                        path, at = [], reader
                        while (step := came_from[at]) is not None:
                            path.append((step[1], at))
                            at = step[0]
                        return path[::-1]
                    queue.append(reader)
    return None


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
