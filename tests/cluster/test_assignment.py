import collections
import random

import pytest

from hpbroker.cluster import assignment, election


def test_the_documented_five_broker_layout():
    """Start 0, shift 0 over brokers 0-4: leaders go round, followers step out
    one further each round (the layout Kafka's own docs draw)."""
    found = assignment.assign_replicas({b: None for b in range(5)}, 10, 3, start=0, shift=0)
    assert found[0] == [0, 1, 2]
    assert found[4] == [4, 0, 1]
    assert found[5] == [0, 2, 3]
    assert found[9] == [4, 1, 2]


@pytest.mark.parametrize("brokers, partitions, rf", [(3, 12, 3), (5, 50, 2), (4, 7, 4), (1, 3, 1)])
def test_replicas_are_distinct_and_leaders_spread(brokers, partitions, rf):
    found = assignment.assign_replicas({b + 1: None for b in range(brokers)}, partitions, rf, rng=random.Random(7))
    assert sorted(found) == list(range(partitions))
    for replicas in found.values():
        assert len(replicas) == rf == len(set(replicas))
    leaders = collections.Counter(replicas[0] for replicas in found.values())
    assert max(leaders.values()) - min(leaders.get(b + 1, 0) for b in range(brokers)) <= 1


def test_added_partitions_continue_the_round():
    brokers = {b: None for b in range(3)}
    whole = assignment.assign_replicas(brokers, 6, 2, start=1, shift=0)
    added = assignment.assign_replicas(brokers, 3, 2, first_partition=3, start=1, shift=0)
    assert added == {p: whole[p] for p in (3, 4, 5)}


def test_racks_each_partition_covers_as_many_racks_as_it_can():
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    found = assignment.assign_replicas(brokers, 30, 3, rng=random.Random(1))
    for replicas in found.values():
        assert len({brokers[b] for b in replicas}) == 3
    found = assignment.assign_replicas({1: "a", 2: "a", 3: "b"}, 9, 3, rng=random.Random(2))
    for replicas in found.values():
        assert len(set(replicas)) == 3 and {"a", "b"} <= {({1: "a", 2: "a", 3: "b"})[b] for b in replicas}
    found = assignment.assign_replicas({1: "a", 2: "a", 3: "b", 4: "b"}, 8, 2, rng=random.Random(3))
    for replicas in found.values():
        assert {1: "a", 2: "a", 3: "b", 4: "b"}[replicas[0]] != {1: "a", 2: "a", 3: "b", 4: "b"}[replicas[1]]


@pytest.mark.parametrize("brokers, rf, message", [
    ({1: None}, 2, "larger than the 1 available"),
    ({1: None}, 0, "at least 1"),
    ({1: "a", 2: None}, 1, "set it on all or none"),
])
def test_impossible_requests_say_why(brokers, rf, message):
    with pytest.raises(assignment.AssignmentError, match=message):
        assignment.assign_replicas(brokers, 1, rf)


@pytest.mark.parametrize("explicit, message", [
    ({0: [1], 2: [2]}, "must be 0..1"),
    ({0: [1, 2], 1: [2]}, "same, non-zero"),
    ({0: [1, 1]}, "names a broker twice"),
    ({0: [1, 9]}, r"unknown broker\(s\) \[9\]"),
])
def test_explicit_assignments_are_checked(explicit, message):
    with pytest.raises(assignment.AssignmentError, match=message):
        assignment.check_explicit(explicit, {1, 2, 3})
    assignment.check_explicit({0: [1, 2], 1: [2, 3]}, {1, 2, 3})


def test_offline_partition_election_keeps_to_the_isr_unless_unclean():
    assert election.offline_partition([1, 2, 3], [1, 2, 3], {2, 3}) == (2, [2, 3])
    assert election.offline_partition([1, 2, 3], [1], {2, 3}) is None
    assert election.offline_partition([1, 2, 3], [1], {2, 3}, unclean=True) == (2, [2])
    assert election.offline_partition([1, 2, 3], [3, 1], {1, 3}) == (1, [3, 1])


def test_preferred_controlled_shutdown_and_reassignment_elections():
    assert election.preferred_replica([1, 2], [2, 1], {1, 2}) == (1, [2, 1])
    assert election.preferred_replica([1, 2], [2], {1, 2}) is None
    assert election.controlled_shutdown([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == (2, [2, 3])
    assert election.controlled_shutdown([1, 2], [1], {1, 2}, {1}) is None
    assert election.reassignment([3, 4], [1, 3, 4], {1, 3, 4}) == (3, [3, 4])
