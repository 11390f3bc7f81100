"""OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47): committed offsets
kept by the group's coordinator, for groups it manages and for "simple" ones."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import (
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    errors,
    flattened,
    grouped,
    request,
    stable,
)


def commit(broker, version: int, group: str, *offsets, generation: int = -1, member_id: str = ""):
    """(topic, partition, offset[, metadata]) each; [(topic, partition, error name)]."""
    rows = ((t, p, {"committed_offset": o, "committed_leader_epoch": 0,
                    "committed_metadata": meta[0] if meta else "m"}) for t, p, o, *meta in offsets)
    answer = broker.send(request(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
                                 member_id=member_id, retention_time=-1, topics=grouped(rows)))
    return [(t, p.partition_index, errors([p])[0]) for t, p in flattened(answer.topics)]


def fetch_offsets(broker, version: int, group: str, partitions=None):
    """OffsetFetch of ``partitions`` ({topic: [partition]}, None: all); the answer."""
    topics = None if partitions is None else [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
    return broker.send(request(OFFSET_FETCH, version, group_id=group, topics=topics,
                               groups=[{"group_id": group, "topics": topics}]))


def committed(topics) -> list[tuple]:
    """(topic, partition, offset, metadata, error name) of an OffsetFetch answer's topics."""
    return [(t, p.partition_index, p.committed_offset, p.metadata, errors([p])[0]) for t, p in flattened(topics)]


def offset_delete(broker, group: str, *partitions):
    answer = broker.send(request(OFFSET_DELETE, 0, group_id=group, topics=grouped(
        (t, p, {}) for t, p in partitions)))
    return answer.error_code, [(t, p.partition_index, errors([p])[0]) for t, p in flattened(answer.topics)]


@pytest.mark.parametrize("commit_version,fetch_version", [(2, 1), (9, 7)])
def test_a_simple_consumers_offsets(coordinated, commit_version, fetch_version):
    """Generation -1 and no member id: offsets of a group the broker does not manage."""
    assert commit(coordinated, commit_version, "simple", ("t", 0, 10, "ten"), ("t", 1, 20)) == [
        ("t", 0, "none"), ("t", 1, "none")]
    answer = fetch_offsets(coordinated, fetch_version, "simple", {"t": [0, 1], "other": [0]})
    assert committed(answer.topics) == [("t", 0, 10, "ten", "none"), ("t", 1, 20, "m", "none"),
                                        ("other", 0, -1, "", "none")]
    if fetch_version >= 5:
        assert [p.committed_leader_epoch for t in answer.topics for p in t.partitions] == [0, 0, -1]
    # a later commit replaces an offset
    commit(coordinated, commit_version, "simple", ("t", 0, 11))
    assert committed(fetch_offsets(coordinated, fetch_version, "simple", {"t": [0]}).topics)[0][2] == 11


def test_all_of_a_groups_offsets_from_v2(coordinated):
    commit(coordinated, 9, "g", ("t", 1, 5), ("t", 0, 4))
    answer = fetch_offsets(coordinated, 2, "g")
    assert answer.error_code == ErrorCode.none
    assert committed(answer.topics) == [("t", 0, 4, "m", "none"), ("t", 1, 5, "m", "none")]
    assert fetch_offsets(coordinated, 2, "nobody").topics == ()


@pytest.mark.parametrize("version", [8, 9])
def test_batched_groups_from_v8(coordinated, version):
    commit(coordinated, 9, "first", ("t", 0, 1))
    commit(coordinated, 9, "second", ("t", 1, 2))
    answer = coordinated.send(request(OFFSET_FETCH, version, groups=[
        {"group_id": "first", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
        {"group_id": "second", "topics": None}, {"group_id": "unknown", "topics": None}]))
    first, second, unknown = answer.groups
    assert [g.group_id for g in answer.groups] == ["first", "second", "unknown"]
    assert committed(first.topics) == [("t", 0, 1, "m", "none"), ("t", 1, -1, "", "none")]
    assert committed(second.topics) == [("t", 1, 2, "m", "none")]
    assert unknown.topics == ()
    assert errors([first, second, unknown]) == ["none", "none", "none"]


@pytest.mark.parametrize("version", [2, 9])
def test_a_members_commits_are_checked_against_the_generation(coordinated, version):
    joined = coordinated.run(stable(coordinated, "g"))
    member, generation = joined.member_id, joined.generation_id
    assert commit(coordinated, version, "g", ("t", 0, 7), generation=generation, member_id=member) == [
        ("t", 0, "none")]
    refused = [commit(coordinated, version, "g", ("t", 0, 8), generation=generation + 1, member_id=member),
               commit(coordinated, version, "g", ("t", 0, 8), generation=generation, member_id="ghost"),
               commit(coordinated, version, "g", ("t", 0, 8))]  # a simple commit to a managed group
    assert [r[0][2] for r in refused] == ["illegal_generation", "unknown_member_id", "unknown_member_id"]
    assert committed(fetch_offsets(coordinated, 1, "g", {"t": [0]}).topics)[0][2] == 7


@pytest.mark.parametrize("version", [2, 9])
def test_commits_to_unknown_partitions_and_too_much_metadata(coordinated, version):
    results = commit(coordinated, version, "g", ("t", 0, 1, "x" * 5000), ("t", 1, 2), ("t", 9, 3), ("nope", 0, 4))
    assert results == [("t", 0, "offset_metadata_too_large"), ("t", 1, "none"), ("t", 9, "unknown_topic_or_partition"),
                       ("nope", 0, "unknown_topic_or_partition")]
    assert committed(fetch_offsets(coordinated, 2, "g").topics) == [("t", 1, 2, "m", "none")]


def test_no_coordinator_yet(broker):
    broker.create_topic("t")
    assert commit(broker, 9, "g", ("t", 0, 1)) == [("t", 0, "coordinator_not_available")]
    v1 = fetch_offsets(broker, 1, "g", {"t": [0]})  # before v2 the error is every partition's
    assert committed(v1.topics) == [("t", 0, -1, "", "coordinator_not_available")]
    v2 = fetch_offsets(broker, 3, "g", {"t": [0]})
    assert v2.error_code == ErrorCode.coordinator_not_available


def test_offset_delete(coordinated):
    coordinated.create_topic("u")
    commit(coordinated, 9, "simple", ("t", 0, 1), ("t", 1, 2))
    assert offset_delete(coordinated, "simple", ("t", 0)) == (ErrorCode.none, [("t", 0, "none")])
    assert committed(fetch_offsets(coordinated, 2, "simple").topics) == [("t", 1, 2, "m", "none")]
    # a live group keeps the offsets of the topics it subscribes to ("t")
    joined = coordinated.run(stable(coordinated, "live"))
    commit(coordinated, 9, "live", ("t", 0, 5), ("u", 0, 6), generation=joined.generation_id,
           member_id=joined.member_id)
    assert offset_delete(coordinated, "live", ("t", 0), ("u", 0)) == (
        ErrorCode.none, [("t", 0, "group_subscribed_to_topic"), ("u", 0, "none")])
    assert committed(fetch_offsets(coordinated, 2, "live").topics) == [("t", 0, 5, "m", "none")]
    assert offset_delete(coordinated, "nobody", ("t", 0)) == (ErrorCode.group_id_not_found, [])


def test_offset_delete_of_an_unknown_topic(coordinated):
    commit(coordinated, 9, "simple", ("t", 0, 1))
    assert offset_delete(coordinated, "simple", ("missing", 0), ("t", 7)) == (
        ErrorCode.none, [("missing", 0, "unknown_topic_or_partition"), ("t", 7, "unknown_topic_or_partition")])


def test_the_empty_group_id_may_commit_and_fetch_offsets(coordinated):
    assert commit(coordinated, 2, "", ("t", 0, 3)) == [("t", 0, "none")]
    assert committed(fetch_offsets(coordinated, 1, "", {"t": [0]}).topics) == [("t", 0, 3, "m", "none")]
