"""The group state machine and the coordinator over a real log, in one event loop:
join/sync/heartbeat/leave, timeouts, fencing, and reload from ``__consumer_offsets``.

Groups run on a ``FakeClock``: time moves only when a test advances it, so
session, rebalance and initial-delay timeouts fire at exact instants and no
test sleeps."""

import asyncio
import os
import time

import pytest

from harness.fake_clock import START_MS, FakeClock, settle
from harness.waiting import until
from hpbroker.clock import SYSTEM, now_ms
from hpbroker.errors import ErrorCode
from hpbroker.server.config import BrokerConfig
from hpbroker.server.ownership import group_partition
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.groups import GroupCoordinator
from hpbroker.workers.groups.state import COMPLETING, EMPTY, PREPARING, STABLE, Group, GroupConfig
from hpbroker.workers.owner_calls import (
    DeleteGroup,
    DescribeGroup,
    Heartbeat,
    JoinedMember,
    JoinGroup,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
    SyncResult,
)
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.topics import TopicRegistry

NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)
PROTOCOLS = [("range", b"r"), ("roundrobin", b"rr")]
# What another task does without the clock moving takes turns of the loop, not
# wall time: ``until(..., turns=TURNS)`` waits that way (see harness.waiting).
TURNS = 10_000


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def group(config: GroupConfig = NO_DELAY) -> tuple[Group, FakeClock]:
    clock = FakeClock()
    return Group("g", config, clock=clock), clock


async def join(group, member_id="", *, client="c", session=1000, rebalance=1000, protocols=PROTOCOLS,
               instance=None, require_known=True):
    return await group.join(member_id, instance, client, "/127.0.0.1", session, rebalance, "consumer", protocols,
                            require_known)


async def join_new(group, **kw):
    """The v4+ two-step join: MEMBER_ID_REQUIRED, then join with the id."""
    first = await join(group, **kw)
    assert first.error == ErrorCode.member_id_required and first.member_id
    return await join(group, first.member_id, **kw)


async def stable_pair(g, clock, *, session=1000, rebalance=1000):
    """Members a (leader) and b, both synced at generation 2; returns their join answers."""
    a = await join_new(g, client="a", session=session, rebalance=rebalance)
    b_join = asyncio.ensure_future(join_new(g, client="b", session=session, rebalance=rebalance))
    await until(lambda: g.state == PREPARING, "the rebalance to begin", turns=TURNS)
    a = await join(g, a.member_id, client="a", session=session, rebalance=rebalance)
    b = await b_join
    assert a.generation == b.generation == 2
    await asyncio.gather(g.sync(a.member_id, None, 2, None, None, [(a.member_id, b"A"), (b.member_id, b"B")]),
                         g.sync(b.member_id, None, 2, None, None, []))
    assert g.state == STABLE
    return a, b


def test_member_id_required_then_a_single_member_group_completes():
    async def scenario():
        g, clock = group()
        joined = await join_new(g)
        member_id = joined.member_id
        assert (joined.error, joined.generation, joined.protocol_type, joined.protocol_name, joined.leader) == (
            ErrorCode.none, 1, "consumer", "range", member_id)
        assert joined.members == [JoinedMember(member_id, None, b"r")]
        assert g.state == COMPLETING and g.state_timestamp == START_MS
        await clock.advance(5)
        assert await g.sync(member_id, None, 1, "consumer", "range", [(member_id, b"A")]) == SyncResult(
            ErrorCode.none, "consumer", "range", b"A")
        assert g.state == STABLE and g.state_timestamp == START_MS + 5  # timestamps come from the clock
        assert g.heartbeat(member_id, None, 1) == ErrorCode.none
        assert g.heartbeat(member_id, None, 0) == ErrorCode.illegal_generation
        assert g.heartbeat("nobody", None, 1) == ErrorCode.unknown_member_id
        assert g.leave(member_id, None) == ErrorCode.none
        assert g.state == EMPTY and g.generation == 2  # the last member left: no rebalance to wait for
        g.close()
    run(scenario())


def test_a_member_id_handed_out_is_forgotten_after_the_session_timeout():
    async def scenario():
        g, clock = group()
        first = await join(g, session=300)
        assert first.error == ErrorCode.member_id_required and first.member_id in g.pending
        await clock.advance(299)
        assert first.member_id in g.pending
        await clock.advance(1)
        assert first.member_id not in g.pending
        assert (await join(g, first.member_id, session=300)).error == ErrorCode.unknown_member_id
        g.close()
    run(scenario())


def test_two_members_the_followers_sync_waits_for_the_leader():
    async def scenario():
        g, clock = group()
        a = await join_new(g, client="a")
        first = a.member_id
        assert g.state == COMPLETING
        # b joins: the group goes back to PreparingRebalance; a must rejoin
        b_join = asyncio.ensure_future(join_new(g, client="b"))
        await until(lambda: g.state == PREPARING, "the rebalance to begin", turns=TURNS)
        assert g.heartbeat(first, None, 1) == ErrorCode.rebalance_in_progress
        a2 = await join(g, first, client="a")
        b = await b_join
        assert a2.generation == b.generation == 2 and a2.leader == b.leader == first  # same generation, a leads
        assert len(a2.members) == 2 and b.members == []  # only the leader sees the members
        follower = asyncio.ensure_future(g.sync(b.member_id, None, 2, None, None, []))
        await clock.advance(500)  # well inside every timeout: only the leader's sync releases it
        assert not follower.done()
        assert (await g.sync(first, None, 2, None, None, [(first, b"A"), (b.member_id, b"B")])).assignment == b"A"
        assert (await follower).assignment == b"B"
        g.close()
    run(scenario())


def test_a_follower_whose_session_ran_out_during_sync_is_still_expired_later():
    """Its expiry was skipped while it waited for the leader's assignment; the
    assignment must start its session again, or a silent death goes unnoticed
    until the next rebalance times out."""
    async def scenario():
        g, clock = group()
        a = await join_new(g, client="a", session=100)
        b_join = asyncio.ensure_future(join_new(g, client="b", session=100))
        await until(lambda: g.state == PREPARING, "the rebalance to begin", turns=TURNS)
        a2 = await join(g, a.member_id, client="a", session=100)
        b = await b_join
        follower = asyncio.ensure_future(g.sync(b.member_id, None, b.generation, None, None, []))
        for _ in range(8):  # 240 ms: past b's session, a heartbeating
            assert g.heartbeat(a.member_id, None, a2.generation) == ErrorCode.none
            await clock.advance(30)
        assert b.member_id in g.members and not follower.done()
        await g.sync(a.member_id, None, a2.generation, None, None, [(a.member_id, b"A"), (b.member_id, b"B")])
        assert (await follower).assignment == b"B" and g.state == STABLE
        for _ in range(3):  # 90 ms after the assignment: b's new session has not run out
            g.heartbeat(a.member_id, None, g.generation)
            await clock.advance(30)
        assert b.member_id in g.members
        g.heartbeat(a.member_id, None, g.generation)
        await clock.advance(10)
        assert b.member_id not in g.members and a.member_id in g.members  # b went silent after its assignment
        g.close()
    run(scenario())


def test_protocol_with_most_votes_among_common_ones_wins():
    async def scenario():
        g, clock = group(GroupConfig(initial_rebalance_delay_ms=50))
        joins = [asyncio.ensure_future(join(g, protocols=p, require_known=False)) for p in (
            [("roundrobin", b""), ("range", b""), ("sticky", b"")],
            [("range", b""), ("roundrobin", b"")],
            [("sticky", b""), ("range", b""), ("roundrobin", b"")])]
        await clock.advance(50)  # two of them arrived during the first delay: a second one follows
        assert not any(j.done() for j in joins)
        await clock.advance(50)
        results = await asyncio.gather(*joins)
        # sticky is not common; range has 2 first-choice votes among {range, roundrobin}
        assert {r.protocol_name for r in results} == {"range"}
        bad = await join(g, protocols=[("other", b"")], require_known=False)
        assert bad.error == ErrorCode.inconsistent_group_protocol
        g.close()
    run(scenario())


def test_initial_rebalance_delay_gathers_members_into_one_generation():
    """KIP-134: the first join waits group.initial.rebalance.delay.ms, and each
    delay in which a member arrived is followed by another (up to the
    rebalance timeout)."""
    async def scenario():
        g, clock = group(GroupConfig(initial_rebalance_delay_ms=100))
        a = asyncio.ensure_future(join(g, require_known=False))
        await clock.advance(50)
        b = asyncio.ensure_future(join(g, require_known=False))
        await clock.advance(149)  # b arrived during the first delay: a second one runs to 200
        assert not a.done() and not b.done() and g.state == PREPARING
        await clock.advance(1)
        ra, rb = await a, await b
        assert ra.generation == rb.generation == 1 and {ra.member_id, rb.member_id} == set(g.members)
        g.close()
    run(scenario())


def test_a_quiet_initial_delay_is_not_extended():
    async def scenario():
        g, clock = group(GroupConfig(initial_rebalance_delay_ms=100))
        a = asyncio.ensure_future(join(g, require_known=False))
        await clock.advance(99)
        assert not a.done()
        await clock.advance(1)
        assert (await a).generation == 1
        g.close()
    run(scenario())


def test_a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance():
    async def scenario():
        g, clock = group()
        a, b = await stable_pair(g, clock, session=200)
        for _ in range(2):  # only a keeps heartbeating
            await clock.advance(90)
            g.heartbeat(a.member_id, None, 2)
        assert b.member_id in g.members and g.state == STABLE  # 180 ms: inside b's session
        await clock.advance(20)
        assert b.member_id not in g.members and g.state == PREPARING
        assert g.heartbeat(b.member_id, None, 2) == ErrorCode.unknown_member_id
        again = await join(g, a.member_id, session=200)
        assert again.generation == 3 and [m.member_id for m in again.members] == [a.member_id]
        g.close()
    run(scenario())


def test_a_commit_counts_as_a_heartbeat():
    async def scenario():
        g, clock = group()
        a, b = await stable_pair(g, clock, session=200)
        for _ in range(3):
            await clock.advance(150)
            g.heartbeat(a.member_id, None, 2)
            g.touch(b.member_id)
        assert set(g.members) == {a.member_id, b.member_id} and g.state == STABLE
        g.close()
    run(scenario())


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped():
    async def scenario():
        g, clock = group()
        a = await join_new(g, session=5000, rebalance=150)
        await g.sync(a.member_id, None, 1, None, None, [])
        b_join = asyncio.ensure_future(join_new(g, session=5000, rebalance=150))  # a never rejoins
        await clock.advance(149)
        assert not b_join.done() and a.member_id in g.members
        await clock.advance(1)
        b = await b_join
        assert b.generation == 2 and a.member_id not in g.members and b.leader == b.member_id
        g.close()
    run(scenario())


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    async def scenario():
        g, clock = group()
        a = await join_new(g, client="a", session=5000, rebalance=300)
        b_join = asyncio.ensure_future(join_new(g, client="b", session=5000, rebalance=300))
        await until(lambda: g.state == PREPARING, "the rebalance to begin", turns=TURNS)
        a = await join(g, a.member_id, client="a", session=5000, rebalance=300)
        b = await b_join
        await clock.advance(100)
        # b never sends SyncGroup
        await g.sync(a.member_id, None, 2, None, None, [(a.member_id, b"A"), (b.member_id, b"B")])
        assert g.state == STABLE and g.pending_sync == {b.member_id}
        await clock.advance(199)
        assert b.member_id in g.members
        await clock.advance(1)  # 300 ms after the join completed
        assert b.member_id not in g.members and g.state == PREPARING
        g.close()
    run(scenario())


def test_static_member_rejoining_with_a_new_id_fences_the_old_one():
    async def scenario():
        g, clock = group()
        leader = await join(g, instance="i-1", client="a")
        assert leader.error == ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
        f_join = asyncio.ensure_future(join(g, instance="i-2", client="b"))
        await until(lambda: g.state == PREPARING, "the rebalance to begin", turns=TURNS)
        leader = await join(g, leader.member_id, instance="i-1", client="a")
        follower = await f_join
        await asyncio.gather(g.sync(leader.member_id, "i-1", 2, None, None,
                                    [(leader.member_id, b"A"), (follower.member_id, b"B")]),
                             g.sync(follower.member_id, "i-2", 2, None, None, []))
        # the follower restarts: same instance id, no member id -> no rebalance, same assignment
        back = await join(g, instance="i-2", client="b")
        assert (back.error == ErrorCode.none and back.generation == 2 and back.member_id != follower.member_id
                and g.state == STABLE)
        assert (await g.sync(back.member_id, "i-2", 2, None, None, [])).assignment == b"B"
        assert g.heartbeat(follower.member_id, "i-2", 2) == ErrorCode.fenced_instance_id
        assert g.leave("", "i-2") == ErrorCode.none and g.state == PREPARING
        g.close()
    run(scenario())


def test_sync_errors():
    async def scenario():
        g, clock = group()
        a = await join_new(g)
        assert (await g.sync(a.member_id, None, 7, None, None, [])).error == ErrorCode.illegal_generation
        assert (await g.sync("who", None, 1, None, None, [])).error == ErrorCode.unknown_member_id
        assert ((await g.sync(a.member_id, None, 1, "consumer", "roundrobin", [])).error
                == ErrorCode.inconsistent_group_protocol)
        g.close()
    run(scenario())


def test_close_stops_every_timer_and_answers_the_waiters():
    async def scenario():
        g, clock = group(GroupConfig(initial_rebalance_delay_ms=100))
        waiting = asyncio.ensure_future(join(g, require_known=False))
        pending = await join(g, session=300)
        await settle()
        g.close()
        assert (await waiting).error == ErrorCode.not_coordinator
        assert all(timer.cancelled for _, _, timer in clock.timers) and pending.member_id not in g.pending
        await clock.advance(10_000)  # nothing left to fire
        assert g.generation == 0
    run(scenario())


def test_the_live_clock_arms_loop_timers_in_milliseconds():
    async def scenario():
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        handle = SYSTEM.call_later(1500, fired.set_result, "late")
        assert handle.when() - loop.time() == pytest.approx(1.5, abs=0.2)
        handle.cancel()
        SYSTEM.call_later(0, fired.set_result, "now")
        assert await fired == "now"
        assert abs(SYSTEM.now_ms() - time.time() * 1000) < 1000
    run(scenario())


# --- the coordinator over a real log -------------------------------------------------------
def make_coordinator(tmp_path, leads=None, **overrides):
    props = {"offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0", **overrides}
    config = BrokerConfig.from_sources(overrides=props)
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir, exist_ok=True)
    topics = TopicRegistry([log_dir], LogConfig())
    logs = LogManager([log_dir], LogConfig(), config_for=topics.config_for).open(clean_shutdown=True)
    return GroupCoordinator(Partitions(logs, topics), topics, config, 0, 1, leads=leads), topics, logs


async def join_group(c, group_id, member_id="", session=6000, require_known=False):
    return await c.join_group(JoinGroup(group_id, member_id, None, "cli", "/h", session, session, "consumer",
                                        PROTOCOLS, require_known))


async def commit(c, group_id, generation, member_id, partitions, version=9) -> list:
    """(topic, partition, error) of each committed partition."""
    done = await c.offset_commit(OffsetCommit(group_id, generation, member_id, None, partitions, version))
    return [(x.topic, x.partition, x.error) for x in done.partitions]


def fetch(c, group_id, topics=None, require_stable=False) -> tuple:
    """(error, [(topic, partition, offset, leader epoch, metadata, error)])."""
    fetched = c.offset_fetch(OffsetFetch(group_id, topics, require_stable))
    return fetched.error, [(x.topic, x.partition, x.offset, x.leader_epoch, x.metadata, x.error)
                           for x in fetched.partitions]


def test_commits_and_group_metadata_survive_a_reload(tmp_path):
    async def first():
        c, topics, logs = make_coordinator(tmp_path)
        await topics.create("events", 2)
        await c.ensure_offsets_topic()  # as FindCoordinator does
        j = await join_group(c, "g")
        await c.sync_group(SyncGroup("g", 1, j.member_id, None, None, None, [(j.member_id, b"assign")]))
        assert await commit(c, "g", 1, j.member_id, [("events", 0, 10, 3, "meta"), ("events", 1, 20, 3, None)]) \
            == [("events", 0, ErrorCode.none), ("events", 1, ErrorCode.none)]
        assert await commit(c, "g", 5, j.member_id, [("events", 0, 11, 3, "")]) \
            == [("events", 0, ErrorCode.illegal_generation)]
        assert await commit(c, "simple", -1, "", [("events", 0, 5, -1, "")]) == [("events", 0, ErrorCode.none)]
        assert (await commit(c, "nogroup", 3, "m", [("events", 0, 5, -1, "")]))[0][2] == ErrorCode.group_id_not_found
        assert (await commit(c, "nogroup", 3, "m", [("events", 0, 5, -1, "")], 8))[0][2] == ErrorCode.illegal_generation
        assert c.delete_group(DeleteGroup("g")).error == ErrorCode.non_empty_group
        assert c.delete_group(DeleteGroup("simple")).error == ErrorCode.none
        assert c.delete_group(DeleteGroup("simple")).error == ErrorCode.group_id_not_found
        offsets_topic = topics.get("__consumer_offsets")
        assert offsets_topic is not None and offsets_topic.configs["cleanup.policy"] == "compact"
        c.close()
        logs.close()
        return j.member_id

    async def second(member_id):
        c, topics, logs = make_coordinator(tmp_path)
        c.start()
        assert fetch(c, "g")[0] == ErrorCode.coordinator_load_in_progress
        await until(lambda: fetch(c, "g")[0] != ErrorCode.coordinator_load_in_progress, "the groups to load",
                    turns=TURNS)
        assert fetch(c, "g", require_stable=True) == (ErrorCode.none, [("events", 0, 10, 3, "meta", ErrorCode.none),
                                                               ("events", 1, 20, 3, "", ErrorCode.none)])
        assert fetch(c, "g", [("events", [0, 5])])[1][1] == ("events", 5, -1, -1, "", ErrorCode.none)
        described = c.describe_group(DescribeGroup("g"))
        assert (described.error, described.state, described.protocol_type, described.protocol_data) == (
            ErrorCode.none, STABLE.value, "consumer", "range")
        assert [(m.member_id, m.assignment) for m in described.members] == [(member_id, b"assign")]
        assert c.describe_group(DescribeGroup("simple")).error == ErrorCode.group_id_not_found
        # members resume after a coordinator move
        assert c.heartbeat(Heartbeat("g", 1, member_id)).error == ErrorCode.none
        c.close()
        logs.close()

    member_id = run(first())
    run(second(member_id))


def test_a_leadership_change_while_loading_voids_the_load(tmp_path):
    """A new leader epoch for this broker mid-replay drops what the replay had
    applied; the partition is then replayed afresh, not left half loaded."""
    p = group_partition("g", 4)

    async def first():
        c, topics, logs = make_coordinator(tmp_path)
        await topics.create("events", 1)
        await c.ensure_offsets_topic()
        assert await commit(c, "g", -1, "", [("events", 0, 10, -1, "")]) == [("events", 0, ErrorCode.none)]
        c.close()
        logs.close()

    async def second():
        c, topics, logs = make_coordinator(tmp_path)
        c.start()
        await asyncio.sleep(0)  # each load replays its first chunk, then yields
        assert fetch(c, "g")[0] == ErrorCode.coordinator_load_in_progress
        c.leadership_changed(p, True)
        await until(lambda: fetch(c, "g")[0] != ErrorCode.coordinator_load_in_progress, "the groups to load",
                    turns=TURNS)
        assert fetch(c, "g") == (ErrorCode.none, [("events", 0, 10, -1, "", ErrorCode.none)])
        c.close()
        logs.close()

    run(first())
    run(second())


def test_a_worker_replays_only_the_offsets_partitions_it_leads(tmp_path):
    async def first():
        c, topics, logs = make_coordinator(tmp_path)
        await topics.create("events", 1)
        await c.ensure_offsets_topic()
        for group_id in ("g", "h"):
            await commit(c, group_id, -1, "", [("events", 0, 10, -1, "")])
        c.close()
        logs.close()

    async def second():
        leading = {group_partition("g", 4)}
        c, topics, logs = make_coordinator(tmp_path, leads=lambda topic, partition: partition in leading)
        c.start()
        await until(lambda: fetch(c, "g")[0] != ErrorCode.coordinator_load_in_progress, "the groups to load",
                    turns=TURNS)
        assert set(c.groups) == {"g"}  # h's partition is another broker's: nothing of it here
        assert fetch(c, "h")[0] == ErrorCode.not_coordinator
        leading.add(group_partition("h", 4))
        c.leadership_changed(group_partition("h", 4), True)
        assert fetch(c, "h") == (ErrorCode.none, [("events", 0, 10, -1, "", ErrorCode.none)])
        c.close()
        logs.close()

    assert group_partition("g", 4) != group_partition("h", 4)
    run(first())
    run(second())


def test_offset_delete_and_expiry(tmp_path):
    async def scenario():
        c, topics, logs = make_coordinator(tmp_path, **{"offsets.retention.minutes": "1"})
        await topics.create("events", 1)
        await c.ensure_offsets_topic()
        await commit(c, "g", -1, "", [("events", 0, 10, -1, "")])
        await commit(c, "h", -1, "", [("events", 0, 1, -1, "")])
        deleted = c.offset_delete(OffsetDelete("g", [("events", 0)]))
        assert (deleted.error, [(x.topic, x.partition, x.error) for x in deleted.partitions]) == (
            ErrorCode.none, [("events", 0, ErrorCode.none)])
        assert fetch(c, "g", [("events", [0])])[1][0][2] == -1
        assert c.offset_delete(OffsetDelete("zzz", [("events", 0)])).error == ErrorCode.group_id_not_found
        assert c.expire_offsets(now_ms()) == 0
        assert c.expire_offsets(now_ms() + 61_000) == 1  # h's commit is older than the retention
        assert "h" not in c.groups and "g" not in c.groups  # empty groups without offsets go too
        c.close()
        logs.close()
    run(scenario())


def test_session_timeout_bounds_and_ownership(tmp_path):
    async def scenario():
        c, topics, logs = make_coordinator(tmp_path)
        await c.ensure_offsets_topic()
        assert (await join_group(c, "g", session=10, require_known=True)).error == ErrorCode.invalid_session_timeout
        assert (await join_group(c, "g", "unknown", require_known=True)).error == ErrorCode.unknown_member_id
        assert (await join_group(c, "", require_known=True)).error == ErrorCode.invalid_group_id
        c.workers = 2  # pretend another worker owns half the partitions
        foreign = next(g for g in (f"g{i}" for i in range(100))
                       if c.heartbeat(Heartbeat(g, 1, "m")).error == ErrorCode.not_coordinator)
        assert c.describe_group(DescribeGroup(foreign)).error == ErrorCode.not_coordinator
        c.close()
        logs.close()
    run(scenario())


def test_a_restarted_static_leader_gets_no_leadership_and_no_rebalance():
    async def scenario():
        g, clock = group()
        leader = await join(g, instance="i-1")
        await g.sync(leader.member_id, "i-1", 1, None, None, [(leader.member_id, b"A")])
        back = await join(g, instance="i-1")
        # the answer names the previous leader id, so the client does not assign
        assert back.error == ErrorCode.none and back.generation == 1 \
            and back.leader == leader.member_id != back.member_id and back.members == []
        assert g.leader == back.member_id and g.state == STABLE
        assert (await g.sync(back.member_id, "i-1", 1, None, None, [])).assignment == b"A"
        g.close()
    run(scenario())
