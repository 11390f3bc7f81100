"""The consumer group protocol (KIP-848) end to end in process:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), and what the
older group APIs make of such a group (OffsetCommit, ListGroups,
DescribeGroups, JoinGroup, DeleteGroups)."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    join_request,
    request,
)

HEARTBEAT, DESCRIBE = 68, 69


def heartbeat(broker, group: str, member_id: str, epoch: int, *, version: int = 1, topics=None, owned=None,
              rebalance_ms: int = -1, **fields):
    return broker.send(request(HEARTBEAT, version, group_id=group, member_id=member_id, member_epoch=epoch,
                               rebalance_timeout=rebalance_ms, subscribed_topic_names=topics,
                               topic_partitions=owned, **fields))


def join(broker, group: str, member_id: str, topics=("t",), version: int = 1):
    return heartbeat(broker, group, member_id, 0, version=version, topics=list(topics), owned=[],
                     rebalance_ms=30_000)


def assigned(answer) -> set[int]:
    return {p for t in answer.assignment.topic_partitions for p in t.partitions}


def commit(broker, group: str, member_id: str, epoch: int, version: int = 9) -> int:
    answer = broker.send(request(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=epoch,
                                 member_id=member_id, topics=[{"name": "t", "partitions": [
                                     {"partition_index": 0, "committed_offset": 5}]}]))
    return answer.topics[0].partitions[0].error_code


def test_a_member_joins_and_gets_every_partition_by_topic_id(coordinated):
    answer = join(coordinated, "g", "m1")
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (ErrorCode.none, "m1", 1)
    assert answer.heartbeat_interval.total_seconds() == 5
    [topic] = answer.assignment.topic_partitions
    assert topic.topic_id == coordinated.topic_id("t") and set(topic.partitions) == {0, 1}
    again = heartbeat(coordinated, "g", "m1", 1)
    assert again.error_code == ErrorCode.none and again.assignment is None


def test_version_0_gets_its_member_id_from_the_coordinator(coordinated):
    answer = join(coordinated, "g", "", version=0)
    assert answer.error_code == ErrorCode.none and len(answer.member_id) == 22
    assert heartbeat(coordinated, "g", answer.member_id, 1, version=0).error_code == ErrorCode.none


@pytest.mark.parametrize("fields, why", [
    (dict(group_id="", member_id="m", member_epoch=0), "GroupId"),
    (dict(group_id="  ", member_id="m", member_epoch=0), "GroupId"),
    (dict(member_id="", member_epoch=0), "MemberId"),  # v1: the client names itself
    (dict(member_epoch=0, rebalance_timeout=-1), "RebalanceTimeoutMs"),
    (dict(member_epoch=0, topic_partitions=None), "TopicPartitions"),
    (dict(member_epoch=0, topic_partitions=[{"topic_id": None, "partitions": [0]}]), "TopicPartitions"),
    (dict(member_epoch=0, subscribed_topic_names=None), "SubscribedTopic"),
    (dict(member_epoch=-2), "InstanceId"),
    (dict(member_epoch=-3), "MemberEpoch"),
    (dict(member_epoch=1, instance_id=""), "InstanceId"),
])
def test_malformed_heartbeats_are_invalid_requests(coordinated, fields, why):
    values = dict(group_id="g", member_id="m", rebalance_timeout=30_000, subscribed_topic_names=["t"],
                  topic_partitions=[])
    values.update(fields)
    answer = coordinated.send(request(HEARTBEAT, 1, **values))
    assert answer.error_code == ErrorCode.invalid_request and why in answer.error_message


def test_commits_and_fetches_follow_the_members_epoch(coordinated):
    join(coordinated, "g", "m1")
    assert commit(coordinated, "g", "m1", 1) == ErrorCode.none
    assert commit(coordinated, "g", "m1", 0) == ErrorCode.stale_member_epoch
    assert commit(coordinated, "g", "m1", 7) == ErrorCode.stale_member_epoch
    assert commit(coordinated, "g", "m1", 1, version=8) == ErrorCode.unsupported_version
    assert commit(coordinated, "g", "nobody", 1) == ErrorCode.unknown_member_id
    assert commit(coordinated, "g", "", -1) == ErrorCode.unknown_member_id  # only an empty group takes those
    assert heartbeat(coordinated, "g", "m1", -1).error_code == ErrorCode.none
    assert commit(coordinated, "g", "", -1) == ErrorCode.none


def test_the_group_is_listed_and_described_as_a_consumer_group(coordinated):
    join(coordinated, "g", "m1")
    join(coordinated, "g", "m2")
    listed = coordinated.send(request(LIST_GROUPS, 5, types_filter=["consumer"])).groups
    assert [(x.group_id, x.group_type, x.protocol_type) for x in listed] == [("g", "consumer", "consumer")]
    assert not coordinated.send(request(LIST_GROUPS, 5, types_filter=["classic"])).groups
    [described] = coordinated.send(request(DESCRIBE, 1, group_ids=["g"])).groups
    assert (described.error_code, described.group_epoch, described.assignor_name) == (ErrorCode.none, 2, "uniform")
    members = {m.member_id: m for m in described.members}
    assert set(members) == {"m1", "m2"} and members["m2"].subscribed_topic_names == ("t",)
    targets = [p for m in members.values() for t in m.target_assignment.topic_partitions for p in t.partitions]
    assert sorted(targets) == [0, 1] and members["m1"].target_assignment.topic_partitions[0].topic_name == "t"
    [classic_view] = coordinated.send(request(DESCRIBE_GROUPS, 6, groups=["g"])).groups
    assert (classic_view.error_code, classic_view.group_state) == (ErrorCode.group_id_not_found, "Dead")
    [before_v6] = coordinated.send(request(DESCRIBE_GROUPS, 5, groups=["g"])).groups
    assert (before_v6.error_code, before_v6.group_state, before_v6.members) == (ErrorCode.none, "Dead", ())
    [unknown] = coordinated.send(request(DESCRIBE, 1, group_ids=["nope"])).groups
    assert unknown.error_code == ErrorCode.group_id_not_found


def test_the_two_protocols_do_not_share_a_group_with_members(coordinated):
    join(coordinated, "new", "m1")
    classic = coordinated.send(join_request(5, "new"))
    assert classic.error_code == ErrorCode.inconsistent_group_protocol
    coordinated.send(join_request(5, "old"))
    assert coordinated.send(join_request(5, "old")).error_code in (ErrorCode.none, ErrorCode.member_id_required)
    [described] = coordinated.send(request(DESCRIBE, 1, group_ids=["old"])).groups
    assert described.error_code == ErrorCode.group_id_not_found  # a classic group is not one of these


def committed(broker, group: str) -> int:
    answer = broker.send(request(OFFSET_FETCH, 7, group_id=group, topics=[{"name": "t", "partition_indexes": [0]}]))
    return answer.topics[0].partitions[0].committed_offset


def test_an_empty_group_changes_protocol_and_keeps_its_offsets(coordinated):
    assert commit(coordinated, "g", "", -1) == ErrorCode.none  # a group with offsets only (classic, empty)
    # a member of a group the coordinator forgot (it restarted): told to join again, and the group stays
    assert heartbeat(coordinated, "g", "m0", 4).error_code == ErrorCode.unknown_member_id
    assert [x.group_id for x in coordinated.send(request(LIST_GROUPS, 5, types_filter=["classic"])).groups] == ["g"]
    assert join(coordinated, "g", "m1").error_code == ErrorCode.none
    assert committed(coordinated, "g") == 5
    assert heartbeat(coordinated, "g", "m1", -1).error_code == ErrorCode.none
    assert coordinated.send(join_request(4, "g", "stale")).error_code == ErrorCode.unknown_member_id
    assert coordinated.send(join_request(4, "g")).error_code == ErrorCode.member_id_required  # classic again
    assert committed(coordinated, "g") == 5
    deleted = coordinated.send(request(DELETE_GROUPS, 2, groups_names=["g"])).results
    assert deleted[0].error_code == ErrorCode.none


def test_a_consumer_group_with_members_is_not_deleted(coordinated):
    join(coordinated, "g", "m1")
    deleted = coordinated.send(request(DELETE_GROUPS, 2, groups_names=["g"])).results
    assert deleted[0].error_code == ErrorCode.non_empty_group
