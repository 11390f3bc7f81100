"""Partition reassignment (Kafka's KIP-455 in ZooKeeper mode) against a real
ZooKeeper: requests made through a worker's ``SharedLink.admin`` (what
AlterPartitionReassignments does) or through Kafka's legacy
``/admin/reassign_partitions``, carried out by the controller of real
ZooKeeper members.  The members have no data plane, so a new replica catching
up is played by writing the ISR as its leader would; one test runs a real
leader's ``ReplicaManager`` to show it takes the new replica in by itself."""

import asyncio

import pytest

from harness.waiting import until, wait_for
from hpbroker.cluster import reassignment, znodes
from hpbroker.errors import ErrorCode
from tests.cluster.members import WAIT_S, LentSession, controller_of, create_topic, set_isr, state, wait_state, worker


@pytest.fixture
def link(chroot, admin):
    """A worker's link to its broker's session, as the reassignment handlers use it."""
    lent = LentSession(chroot)
    yield lent.link
    lent.close()


def admin_call(coro):
    """An admin coroutine, run to its end from a test's thread."""
    return asyncio.run(coro)


def wait_live(link, *ids):
    def listed() -> bool:
        link.refresh()  # (no event loop reads the board for this test's thread)
        return link.image().live >= set(ids)
    wait_for(listed, WAIT_S, f"the worker's image to list brokers {ids}")


def assignment(admin, topic) -> znodes.TopicAssignment:
    data, _ = admin.get(znodes.topic_path(topic))
    return znodes.TopicAssignment.decode(topic, data)


def errors(outcomes) -> dict[int, ErrorCode]:
    return {p: outcome.error for p, outcome in outcomes.items()}


# --- the checks, without ZooKeeper ------------------------------------------------------------
def test_plan_follows_kafkas_order_of_checks():
    current = znodes.TopicAssignment("t", {0: [1, 2], 1: [2, 3]})
    planned, outcomes = reassignment.plan("t", current, {0: [3, 2], 1: [2, 9], 2: [1], 3: None, 4: [9]},
                                          {1, 2, 3})
    assert errors(outcomes) == {0: ErrorCode.none, 1: ErrorCode.invalid_replica_assignment,
                                2: ErrorCode.unknown_topic_or_partition, 3: ErrorCode.no_reassignment_in_progress,
                                4: ErrorCode.invalid_replica_assignment}
    assert planned is not None
    # target first, then the origin's others; what is added and removed
    assert planned.partitions == {0: [3, 2, 1], 1: [2, 3]}
    assert planned.adding_replicas == {0: [3]} and planned.removing_replicas == {0: [1]}
    # the origin keeps the order it has in the replicas (as in Kafka, whose znode has no other record of it)
    assert znodes.target_replicas(planned, 0) == [3, 2] and znodes.origin_replicas(planned, 0) == [2, 1]

    # redirected from the origin (not from the replicas of the first move), then cancelled
    redirected, outcomes = reassignment.plan("t", planned, {0: [1, 4]}, {1, 2, 3, 4})
    assert errors(outcomes) == {0: ErrorCode.none}
    assert redirected is not None
    assert (redirected.partitions[0], redirected.adding_replicas[0], redirected.removing_replicas[0]) == \
        ([1, 4, 2], [4], [2])
    cancelled, outcomes = reassignment.plan("t", redirected, {0: None}, {1, 2, 3, 4})
    assert errors(outcomes) == {0: ErrorCode.none}
    assert cancelled == current  # back to the origin ([1, 4, 2] less 4), nothing added or removed

    unchanged, outcomes = reassignment.plan("t", current, {1: [2, 3]}, {1, 2, 3})
    assert unchanged is None and errors(outcomes) == {1: ErrorCode.none}
    _planned, outcomes = reassignment.plan("t", current, {0: [1, 2, 3]}, {1, 2, 3},
                                           allow_replication_factor_change=False)
    assert errors(outcomes) == {0: ErrorCode.invalid_replication_factor}
    _planned, outcomes = reassignment.plan("gone", None, {0: [1], 1: None, 2: [7]}, {1})
    assert errors(outcomes) == {0: ErrorCode.unknown_topic_or_partition, 1: ErrorCode.no_reassignment_in_progress,
                                2: ErrorCode.invalid_replica_assignment}


def test_legacy_znode_json_reads_what_kafkas_tool_writes():
    data = (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],"log_dirs":["any","any"]},'
            b'{"topic":"u","partition":"1","replicas":[1]}]}')
    assert znodes.decode_reassignment(data) == [("t", 0, [2, 3]), ("u", 1, [1])]
    assert znodes.decode_reassignment(znodes.encode_reassignment([("t", 0, [2, 3])])) == [("t", 0, [2, 3])]
    for bad in (b'{"version":1,"partitions":[{"topic":"t","partition":0}]}', b'{"partitions":{"t":1}}', b"[]"):
        with pytest.raises(znodes.ZnodeFormatError):
            znodes.decode_reassignment(bad)


# --- the controller ------------------------------------------------------------------------------
def test_a_partition_moves_once_its_target_is_in_sync(start_members, admin, link):
    start_members(1, 2, 3)
    create_topic(admin, "t", {0: [1, 2]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2])
    wait_live(link, 1, 2, 3)

    assert errors(admin_call(link.admin.alter_reassignments("t", {0: [3, 2]}))) == {0: ErrorCode.none}
    moving = assignment(admin, "t")
    assert (moving.partitions, moving.adding_replicas, moving.removing_replicas) == \
        ({0: [3, 2, 1]}, {0: [3]}, {0: [1]})
    assert admin_call(link.admin.list_reassignments(None)) == [
        reassignment.OngoingReassignment("t", 0, [3, 2, 1], [3], [1])]
    assert admin_call(link.admin.list_reassignments({"t": [1]})) == []
    assert admin_call(link.admin.list_reassignments({"nope": [0]})) == []
    # the leader gets a new epoch, so it takes the new replica set (and the new follower) in
    bumped = wait_state(admin, "t", 0, "a new leader epoch", lambda s: s.leader_epoch == 1)
    assert (bumped.leader, bumped.isr) == (1, [1, 2])

    set_isr(admin, "t", 0, [1, 2, 3])  # broker 3 caught up
    done = wait_state(admin, "t", 0, "the reassignment to complete", lambda s: s.leader_epoch == 2)
    assert (done.leader, done.isr) == (3, [2, 3])  # the old leader is not in the target: the first in sync is
    final = assignment(admin, "t")
    assert (final.partitions, final.adding_replicas, final.removing_replicas) == ({0: [3, 2]}, {}, {})
    assert admin_call(link.admin.list_reassignments(None)) == []


def test_the_leader_stays_when_it_is_in_the_target(start_members, admin, link):
    start_members(1, 2, 3)
    create_topic(admin, "t", {0: [1, 2, 3]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2, 3])
    wait_live(link, 1, 2, 3)
    # fewer replicas, all in sync already: done at once, leader kept with a new epoch
    assert errors(admin_call(link.admin.alter_reassignments("t", {0: [2, 1]}))) == {0: ErrorCode.none}
    done = wait_state(admin, "t", 0, "the reassignment to complete", lambda s: 3 not in s.isr)
    assert (done.leader, done.isr, done.leader_epoch) == (1, [1, 2], 1)
    wait_for(lambda: assignment(admin, "t").partitions == {0: [2, 1]}, WAIT_S, "the final assignment")
    assert not znodes.being_reassigned(assignment(admin, "t"), 0)


def test_cancelling_returns_to_the_origin_and_the_added_replicas_leave_the_isr(start_members, admin, link):
    start_members(1, 2, 3, 4)
    create_topic(admin, "t", {0: [1, 2], 1: [2, 3]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2])
    wait_state(admin, "t", 1, "a leader", lambda s: s.leader == 2)
    wait_live(link, 1, 2, 3, 4)

    assert errors(admin_call(link.admin.alter_reassignments("t", {0: [3, 4]}))) == {0: ErrorCode.none}
    wait_state(admin, "t", 0, "a new leader epoch", lambda s: s.leader_epoch == 1)
    set_isr(admin, "t", 0, [1, 2, 3])  # broker 3 caught up, broker 4 not yet: not done
    assert errors(admin_call(link.admin.alter_reassignments("t", {0: None}))) == {0: ErrorCode.none}
    back = assignment(admin, "t")
    assert (back.partitions[0], back.adding_replicas, back.removing_replicas) == ([1, 2], {}, {})
    cancelled = wait_state(admin, "t", 0, "broker 3 to leave the ISR", lambda s: 3 not in s.isr)
    assert (cancelled.leader, cancelled.isr, cancelled.leader_epoch) == (1, [1, 2], 2)

    assert errors(admin_call(link.admin.alter_reassignments("t", {0: None}))) == {
        0: ErrorCode.no_reassignment_in_progress}
    refused = admin_call(link.admin.alter_reassignments("t", {1: [2, 9], 5: [1], 6: None, 0: [], 2: [1, 1]}))
    assert errors(refused) == {
        1: ErrorCode.invalid_replica_assignment, 5: ErrorCode.unknown_topic_or_partition,
        6: ErrorCode.no_reassignment_in_progress, 0: ErrorCode.invalid_replica_assignment,
        2: ErrorCode.invalid_replica_assignment}
    assert errors(admin_call(link.admin.alter_reassignments("nope", {0: [1]}))) == {
        0: ErrorCode.unknown_topic_or_partition}
    assert assignment(admin, "t").partitions == {0: [1, 2], 1: [2, 3]}  # refused requests wrote nothing


def test_legacy_reassign_partitions_znode(start_members, admin):
    start_members(1, 2, 3)
    create_topic(admin, "t", {0: [1, 2], 1: [2, 3]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2])
    wait_state(admin, "t", 1, "a leader", lambda s: s.leader == 2)
    # as kafka-reassign-partitions (ZooKeeper mode) writes it
    admin.create(znodes.REASSIGN_PARTITIONS, b'{"version":1,"partitions":['
                 b'{"topic":"t","partition":0,"replicas":[2,3],"log_dirs":["any","any"]},'
                 b'{"topic":"missing","partition":0,"replicas":[1]},'
                 b'{"topic":"t","partition":1,"replicas":[2,3]}]}')
    wait_for(lambda: znodes.being_reassigned(assignment(admin, "t"), 0), WAIT_S, "the reassignment to start")
    assert assignment(admin, "t").partitions == {0: [2, 3, 1], 1: [2, 3]}
    # the unknown partition is refused and the one already in place is done: both leave the znode
    wait_for(lambda: znodes.decode_reassignment(admin.get(znodes.REASSIGN_PARTITIONS)[0]) == [("t", 0, [2, 3])],
             WAIT_S, "the znode to keep only what is under way")

    wait_state(admin, "t", 0, "a new leader epoch", lambda s: s.leader_epoch == 1)
    set_isr(admin, "t", 0, [1, 2, 3])
    done = wait_state(admin, "t", 0, "the reassignment to complete", lambda s: s.leader_epoch == 2)
    assert (done.leader, done.isr) == (2, [2, 3])
    wait_for(lambda: not admin.exists(znodes.REASSIGN_PARTITIONS), WAIT_S, "the znode to be deleted when done")
    assert assignment(admin, "t").partitions == {0: [2, 3], 1: [2, 3]}


def test_an_api_request_takes_a_partition_out_of_the_legacy_znode(start_members, admin, link):
    start_members(1, 2, 3)
    create_topic(admin, "t", {0: [1, 2]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1)
    wait_live(link, 1, 2, 3)
    admin.create(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment([("t", 0, [2, 3])]))
    wait_for(lambda: znodes.being_reassigned(assignment(admin, "t"), 0), WAIT_S, "the reassignment to start")
    # the latest request wins: the partition goes back, and the znode is done with
    assert errors(admin_call(link.admin.alter_reassignments("t", {0: None}))) == {0: ErrorCode.none}
    assert not admin.exists(znodes.REASSIGN_PARTITIONS)
    assert assignment(admin, "t").partitions == {0: [2, 1]}  # the origin, in the order the move left it


def test_a_new_controller_resumes_a_reassignment(start_members, admin, link, chroot):
    members = start_members(1, 2, 3, 4)
    wait_for(lambda: admin.exists(znodes.CONTROLLER), WAIT_S, "a controller")
    first, _epoch = controller_of(admin)
    a, b, c = sorted(set(members) - {first})
    create_topic(admin, "t", {0: [a, b]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == a and s.isr == [a, b])
    wait_live(link, a, b, c)
    assert errors(admin_call(link.admin.alter_reassignments("t", {0: [b, c]}))) == {0: ErrorCode.none}
    wait_state(admin, "t", 0, "a new leader epoch", lambda s: s.leader_epoch == 1)

    members[first].crash(chroot)
    wait_for(lambda: admin.exists(znodes.CONTROLLER) and controller_of(admin)[0] != first, WAIT_S,
             "another broker to take over")
    # the new controller gives the leader a new epoch for the reassignment it finds, then completes it
    wait_state(admin, "t", 0, "the new controller's epoch bump", lambda s: s.leader_epoch == 2)
    set_isr(admin, "t", 0, [a, b, c])
    done = wait_state(admin, "t", 0, "the reassignment to complete", lambda s: s.leader_epoch == 3)
    assert (done.leader, done.isr) == (b, [b, c])
    assert assignment(admin, "t").partitions == {0: [b, c]}


def test_unclean_election_on_request(start_members, admin, link, chroot):
    members = start_members(1, 2)
    create_topic(admin, "t", {0: [1, 2]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2])
    set_isr(admin, "t", 0, [1])  # broker 2 fell behind
    members[1].crash(chroot)
    wait_state(admin, "t", 0, "the partition to go offline", lambda s: s.leader == -1)
    admin_call(link.admin.request_unclean_election([("t", 0)]))
    elected = wait_state(admin, "t", 0, "broker 2 to lead", lambda s: s.leader == 2)
    assert elected.isr == [2]
    wait_for(lambda: not admin.exists(znodes.UNCLEAN_LEADER_ELECTION), WAIT_S, "the request to be taken")


def test_election_requests_add_to_a_pending_one(admin, link):
    # no controller runs here: the first request is still pending when the second comes
    admin_call(link.admin.request_preferred_election([("a", 0)]))
    admin_call(link.admin.request_preferred_election([("t", 1), ("a", 0)]))
    data, _ = admin.get(znodes.PREFERRED_REPLICA_ELECTION)
    assert znodes.decode_preferred_election(data) == [("a", 0), ("t", 1)]


# --- with a real leader ---------------------------------------------------------------------------------
def test_the_leader_takes_the_new_replica_in_and_the_reassignment_completes(start_members, admin, chroot, tmp_path):
    """Broker 1's data plane is a real ReplicaManager: the epoch bump gives it
    the new replica set, broker 3's fetch (played by ``locate``) brings it into
    the ISR, and the controller finishes the move."""
    start_members(1, 2, 3)
    admin.create(znodes.topic_path("t"), znodes.TopicAssignment("t", {0: [1, 2]}).encode())
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2])

    async def main():
        async with worker(chroot, tmp_path) as parts:
            link = parts.link

            def leads_at(epoch: int) -> bool:
                found = parts.partitions.resolve("t", 0)
                return parts.leads("t", 0) and not isinstance(found, ErrorCode) and found.leader_epoch == epoch
            await until(lambda: parts.leads("t", 0), "broker 1 to lead")
            await until(lambda: link.image().live >= {1, 2, 3}, "the image to list every broker")
            outcomes = await link.admin.alter_reassignments("t", {0: [1, 3]})
            assert errors(outcomes) == {0: ErrorCode.none}
            await until(lambda: leads_at(1), "broker 1 to lead at the new epoch")
            epoch = link.image().brokers[3].epoch  # the incarnation of broker 3 its fetches name
            parts.follower_fetch("t", 0, 0, 3, epoch)  # it holds everything
            await until(lambda: (s := state(admin, "t", 0)) is not None and s.leader_epoch == 2,
                        "the reassignment to complete")
            done = state(admin, "t", 0)
            assert done is not None
            assert (done.leader, done.isr) == (1, [1, 3])
            assert assignment(admin, "t").partitions == {0: [1, 3]}
            await until(lambda: leads_at(2), "broker 1 to lead under the final assignment")

    asyncio.run(main())
