"""Choosing a partition's leader, Kafka's four ways.

Each takes the replica assignment (its order is the preference: the first
replica is the preferred leader), the ISR and the live brokers, and returns
the new leader and ISR, or None when no replica may lead (the partition goes
offline, leader -1, until one comes back).
"""

from __future__ import annotations

from typing import NamedTuple

from hpbroker.sentinels import NO_LEADER


class Election(NamedTuple):
    leader: int
    isr: list[int]


def offline_partition(replicas: list[int], isr: list[int], live: set[int], *, unclean: bool = False) -> Election | None:
    """The leader died: the first live replica in the ISR.  With
    ``unclean.leader.election.enable`` a live replica outside the ISR may lead
    (losing what it never copied) rather than none."""
    for replica in replicas:
        if replica in live and replica in isr:
            return Election(replica, [r for r in isr if r in live])
    if unclean:
        for replica in replicas:
            if replica in live:
                return Election(replica, [replica])
    return None


def preferred_replica(replicas: list[int], isr: list[int], live: set[int]) -> Election | None:
    """Give leadership back to the preferred replica, when it is live and in sync."""
    preferred = replicas[0]
    if preferred in live and preferred in isr:
        return Election(preferred, isr)
    return None


def controlled_shutdown(replicas: list[int], isr: list[int], live: set[int], leaving: set[int]) -> Election | None:
    """A broker is stopping: a leader among the ISR that is not leaving; the
    leaving brokers leave the ISR too."""
    staying = [r for r in isr if r not in leaving and r in live]
    for replica in replicas:
        if replica in staying:
            return Election(replica, staying)
    return None


def reassignment(target: list[int], isr: list[int], live: set[int], leader: int = NO_LEADER) -> Election | None:
    """A reassignment completed: the current leader when it is in the new list
    and live (leadership moves only when it must, as in Kafka), else the first
    replica of the new list that is live and in sync; the ISR keeps only the
    new list's live replicas."""
    isr = [r for r in isr if r in target and r in live]
    if leader in isr:
        return Election(leader, isr)
    for replica in target:
        if replica in isr:
            return Election(replica, isr)
    return None
