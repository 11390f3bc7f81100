"""The group APIs end to end in process: JoinGroup (11), SyncGroup (14),
Heartbeat (12), LeaveGroup (13), DescribeGroups (15), ListGroups (16) and
DeleteGroups (42), through the coordinator this worker owns."""

import asyncio

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import (
    CLIENT_HOST_SEEN,
    CLIENT_ID,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    LEAVE_GROUP,
    LIST_GROUPS,
    PROTOCOL_TYPE,
    errors,
    join,
    join_request,
    request,
    stable,
    subscription,
    sync_request,
    until,
)


def heartbeat(broker, version: int, group: str, generation: int, member_id: str):
    return broker.call(request(HEARTBEAT, version, group_id=group, generation_id=generation, member_id=member_id))


def leave(broker, version: int, group: str, *members):
    """v0-v2: one member id; v3+: (member id, instance id) pairs."""
    return broker.call(request(LEAVE_GROUP, version, group_id=group, member_id=members[0] if members else "",
                               members=[{"member_id": m, "group_instance_id": i} for m, i in members]
                               if version >= 3 else None))


def describe(broker, version: int, *groups):
    return broker.send(request(DESCRIBE_GROUPS, version, groups=groups)).groups


def list_groups(broker, version: int, **filters):
    return broker.send(request(LIST_GROUPS, version, **filters))


def delete_groups(broker, version: int, *groups):
    return broker.send(request(DELETE_GROUPS, version, groups_names=groups)).results


# --- JoinGroup ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", [4, 7])
def test_a_new_member_first_gets_its_id_then_joins(coordinated, version):
    first = coordinated.send(join_request(version, "g"))
    assert (first.error_code, first.generation_id) == (ErrorCode.member_id_required, -1)
    assert first.member_id.startswith(CLIENT_ID + "-")
    joined = coordinated.send(join_request(version, "g", first.member_id))
    assert (joined.error_code, joined.generation_id, joined.member_id) == (ErrorCode.none, 1, first.member_id)
    assert (joined.leader, joined.protocol_name) == (first.member_id, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, subscription("t"))]
    if version >= 7:
        assert joined.protocol_type == PROTOCOL_TYPE


@pytest.mark.parametrize("version", [0, 3])
def test_before_v4_a_member_joins_at_once(coordinated, version):
    joined = coordinated.run(join(coordinated, "g", version))
    assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 1, joined.member_id)


@pytest.mark.parametrize("version", [0, 7])
def test_join_refusals(coordinated, version):
    coordinated.run(stable(coordinated, "busy"))
    refused = [
        coordinated.send(join_request(version, "g", session_ms=100)),  # below group.min.session.timeout.ms
        coordinated.send(join_request(version, "g", "ghost")),  # a member id the group never gave
        coordinated.send(join_request(version, "")),
        coordinated.send(join_request(version, "busy", protocol_type="connect")),
        coordinated.send(join_request(version, "busy", protocols=("roundrobin",))),
    ]
    assert errors(refused) == ["invalid_session_timeout", "unknown_member_id", "invalid_group_id",
                               "inconsistent_group_protocol", "inconsistent_group_protocol"]
    assert all(r.generation_id == -1 for r in refused)


def test_no_coordinator_before_the_offsets_topic_exists(broker):
    assert broker.send(join_request(5, "g")).error_code == ErrorCode.coordinator_not_available


# --- a whole rebalance ---------------------------------------------------------------------
def test_two_members_rebalance_sync_and_heartbeat(coordinated):
    broker = coordinated

    async def scenario():
        a = await stable(broker, "g", b"a-alone")
        assert errors([await heartbeat(broker, 3, "g", 1, a.member_id)]) == ["none"]
        b_joining = asyncio.ensure_future(join(broker, "g", 5))
        group = broker.groups.groups["g"]
        await until(lambda: len(group.members) == 2, "b waiting in the join")
        # a hears of the rebalance through its heartbeat and rejoins
        assert errors([await heartbeat(broker, 3, "g", 1, a.member_id)]) == ["rebalance_in_progress"]
        a2 = await join(broker, "g", 5, member_id=a.member_id)
        b = await b_joining
        assert (a2.generation_id, b.generation_id) == (2, 2)
        assert a2.leader == b.leader == a.member_id
        assert sorted(m.member_id for m in a2.members) == sorted([a.member_id, b.member_id])
        assert b.members == ()  # only the leader gets the members
        # the follower's sync waits for the leader's assignment
        b_syncing = asyncio.ensure_future(broker.call(sync_request(5, "g", 2, b.member_id)))
        await until(lambda: b.member_id in group.members and group.members[b.member_id].awaiting_sync,
                    "b waiting in the sync")
        a_synced = await broker.call(sync_request(5, "g", 2, a.member_id, {a.member_id: b"a-part",
                                                                           b.member_id: b"b-part"}))
        b_synced = await b_syncing
        assert (a_synced.assignment, b_synced.assignment) == (b"a-part", b"b-part")
        assert (b_synced.protocol_type, b_synced.protocol_name) == (PROTOCOL_TYPE, "range")
        beats = [await heartbeat(broker, 4, "g", 2, a.member_id), await heartbeat(broker, 4, "g", 1, a.member_id),
                 await heartbeat(broker, 4, "g", 2, "ghost"), await heartbeat(broker, 4, "nope", 1, a.member_id)]
        assert errors(beats) == ["none", "illegal_generation", "unknown_member_id", "unknown_member_id"]
        return a, b

    a, b = broker.run(scenario())
    [described] = describe(broker, 5, "g")
    assert (described.error_code, described.group_state, described.protocol_type, described.protocol_data) == (
        ErrorCode.none, "Stable", PROTOCOL_TYPE, "range")
    members = {m.member_id: m for m in described.members}
    assert sorted(members) == sorted([a.member_id, b.member_id])
    assert (members[b.member_id].client_id, members[b.member_id].client_host) == (CLIENT_ID, CLIENT_HOST_SEEN)
    assert (members[b.member_id].member_metadata, members[b.member_id].member_assignment) == (
        subscription("t"), b"b-part")


@pytest.mark.parametrize("version", [0, 4])
def test_heartbeats(coordinated, version):
    joined = coordinated.run(stable(coordinated, "g"))
    member, generation = joined.member_id, joined.generation_id
    beats = coordinated.gather(heartbeat(coordinated, version, "g", generation, member),
                               heartbeat(coordinated, version, "g", generation - 1, member),
                               heartbeat(coordinated, version, "g", generation, "ghost"),
                               heartbeat(coordinated, version, "", generation, member))
    assert errors(beats) == ["none", "illegal_generation", "unknown_member_id", "invalid_group_id"]
    assert hasattr(beats[0], "throttle_time") == (version >= 1)


@pytest.mark.parametrize("version", [0, 5])
def test_sync_refusals(coordinated, version):
    joined = coordinated.run(join(coordinated, "g"))
    refused = [coordinated.send(sync_request(version, "g", joined.generation_id + 1, joined.member_id)),
               coordinated.send(sync_request(version, "g", joined.generation_id, "ghost")),
               coordinated.send(sync_request(version, "nope", 1, joined.member_id))]
    assert errors(refused) == ["illegal_generation", "unknown_member_id", "unknown_member_id"]
    if version >= 5:
        odd = coordinated.send(sync_request(version, "g", joined.generation_id, joined.member_id,
                                            protocol_type=PROTOCOL_TYPE, protocol_name="roundrobin"))
        assert odd.error_code == ErrorCode.inconsistent_group_protocol


# --- LeaveGroup ----------------------------------------------------------------------------
def test_leave_one_member(coordinated):
    joined = coordinated.run(stable(coordinated, "g"))
    left, again = (coordinated.run(leave(coordinated, 0, "g", joined.member_id)) for _ in range(2))
    assert errors([left, again]) == ["none", "unknown_member_id"]
    assert describe(coordinated, 0, "g")[0].group_state == "Empty"


def test_leave_a_batch_of_members_static_ones_by_instance_id(coordinated):
    broker = coordinated

    async def scenario():
        a = await stable(broker, "g", instance_id="static-a")
        b_joining = asyncio.ensure_future(join(broker, "g", 5))
        await until(lambda: len(broker.groups.groups["g"].members) == 2)
        await join(broker, "g", 5, member_id=a.member_id, instance_id="static-a")
        b = await b_joining
        return await leave(broker, 3, "g", ("", "static-a"), (b.member_id, None), ("ghost", None)), b

    left, b = broker.run(scenario())
    assert left.error_code == ErrorCode.none
    assert [(m.member_id, m.group_instance_id) for m in left.members] == [("", "static-a"), (b.member_id, None),
                                                                         ("ghost", None)]
    assert errors(left.members) == ["none", "none", "unknown_member_id"]
    assert describe(broker, 5, "g")[0].group_state == "Empty"
    [unknown] = broker.run(leave(broker, 3, "nope", ("m", None))).members
    assert unknown.error_code == ErrorCode.unknown_member_id


# --- DescribeGroups, ListGroups, DeleteGroups --------------------------------------------------
@pytest.mark.parametrize("version", [0, 5, 6])
def test_describe_an_unknown_group(coordinated, version):
    [found] = describe(coordinated, version, "nope")
    assert (found.group_id, found.group_state, found.members) == ("nope", "Dead", ())
    if version >= 6:  # KIP-1043
        assert found.error_code == ErrorCode.group_id_not_found and found.error_message
    else:
        assert found.error_code == ErrorCode.none


def test_describe_shows_no_assignment_until_stable(coordinated):
    joined = coordinated.run(join(coordinated, "g"))
    [found] = describe(coordinated, 5, "g")
    assert (found.group_state, found.protocol_data) == ("CompletingRebalance", "")
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in found.members] == [
        (joined.member_id, b"", b"")]


@pytest.mark.parametrize("version", [0, 5])
def test_list_groups(coordinated, version):
    coordinated.run(stable(coordinated, "stable-group"))
    coordinated.run(join(coordinated, "completing-group"))
    answer = list_groups(coordinated, version)
    assert answer.error_code == ErrorCode.none
    assert [(g.group_id, g.protocol_type) for g in answer.groups] == [("completing-group", PROTOCOL_TYPE),
                                                                     ("stable-group", PROTOCOL_TYPE)]
    if version >= 4:
        assert [g.group_state for g in answer.groups] == ["CompletingRebalance", "Stable"]
        assert [g.group_id for g in list_groups(coordinated, version, states_filter=["stable"]).groups] == [
            "stable-group"]
    if version >= 5:
        assert {g.group_type for g in answer.groups} == {"classic"}
        assert list_groups(coordinated, version, types_filter=["consumer"]).groups == ()


@pytest.mark.parametrize("version", [0, 2])
def test_delete_groups(coordinated, version):
    joined = coordinated.run(stable(coordinated, "busy"))
    coordinated.run(stable(coordinated, "idle"))
    coordinated.run(leave(coordinated, 0, "idle", coordinated.groups.groups["idle"].leader))
    results = delete_groups(coordinated, version, "busy", "idle", "nope")
    assert [r.group_id for r in results] == ["busy", "idle", "nope"]
    assert errors(results) == ["non_empty_group", "none", "group_id_not_found"]
    assert describe(coordinated, 6, "idle")[0].error_code == ErrorCode.group_id_not_found
    coordinated.run(leave(coordinated, 0, "busy", joined.member_id))
    assert errors(delete_groups(coordinated, version, "busy")) == ["none"]
