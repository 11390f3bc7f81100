"""The group state machine and the coordinator over a real log, in one event loop:
join/sync/heartbeat/leave, timeouts, fencing, and reload from ``__consumer_offsets``.

Groups run on a ``FakeClock``: time moves only when a test advances it, so
session, rebalance and initial-delay timeouts fire at exact instants and no
test sleeps."""

import asyncio
import heapq
import itertools
import os
import time

import pytest

from hpbroker import errors as E
from hpbroker.server.config import BrokerConfig
from hpbroker.server.ownership import group_partition
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.groups import GroupCoordinator
from hpbroker.clock import now_ms
from hpbroker.workers.groups.state import COMPLETING, EMPTY, PREPARING, STABLE, Group, GroupConfig, LoopClock
from hpbroker.workers.partitions import PartitionService
from hpbroker.workers.topics import TopicRegistry

NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)
PROTOCOLS = [("range", b"r"), ("roundrobin", b"rr")]
START_MS = 1_700_000_000_000


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def settle():
    """Give every ready task its turn (a task woken by a future needs one)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition, turns: int = 10_000):
    """Let the loop run until ``condition()`` holds (a state change another task makes)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


class FakeTimer:
    def __init__(self, when: int, callback, args):
        self.when, self.callback, self.args, self.cancelled = when, callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A group clock whose time moves only in ``advance``, which fires the
    timers it passes in deadline order (ties in the order they were armed,
    as the loop does) and lets the woken tasks run after each."""

    def __init__(self, now: int = START_MS):
        self.now = now
        self.timers: list = []
        self.seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms: int, callback, *args) -> FakeTimer:
        timer = FakeTimer(self.now + delay_ms, callback, args)
        heapq.heappush(self.timers, (timer.when, next(self.seq), timer))
        return timer

    async def advance(self, ms: int) -> None:
        target = self.now + ms
        await settle()
        while self.timers and self.timers[0][0] <= target:
            when, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                self.now = when
                timer.callback(*timer.args)
                await settle()
        self.now = target
        await settle()


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
    assert first[0] == E.MEMBER_ID_REQUIRED and first[5]
    return await join(group, first[5], **kw)


async def stable_pair(g, clock, *, session=1000, rebalance=1000):
    """Members a (leader) and b, both synced at generation 2; returns their join answers."""
    a = await join_new(g, client="a", session=session, rebalance=rebalance)
    b_join = asyncio.ensure_future(join_new(g, client="b", session=session, rebalance=rebalance))
    await until(lambda: g.state == PREPARING)
    a = await join(g, a[5], client="a", session=session, rebalance=rebalance)
    b = await b_join
    assert a[1] == b[1] == 2
    await asyncio.gather(g.sync(a[5], None, 2, None, None, [(a[5], b"A"), (b[5], b"B")]),
                         g.sync(b[5], None, 2, None, None, []))
    assert g.state == STABLE
    return a, b


def test_member_id_required_then_a_single_member_group_completes():
    async def scenario():
        g, clock = group()
        error, generation, ptype, pname, leader, member_id, members, _ = await join_new(g)
        assert (error, generation, ptype, pname, leader) == (E.NONE, 1, "consumer", "range", member_id)
        assert members == [(member_id, None, b"r")]
        assert g.state == COMPLETING and g.state_timestamp == START_MS
        await clock.advance(5)
        assert await g.sync(member_id, None, 1, "consumer", "range", [(member_id, b"A")]) == (
            E.NONE, "consumer", "range", b"A")
        assert g.state == STABLE and g.state_timestamp == START_MS + 5  # timestamps come from the clock
        assert g.heartbeat(member_id, None, 1) == E.NONE
        assert g.heartbeat(member_id, None, 0) == E.ILLEGAL_GENERATION
        assert g.heartbeat("nobody", None, 1) == E.UNKNOWN_MEMBER_ID
        assert g.leave(member_id, None) == E.NONE
        assert g.state == EMPTY and g.generation == 2  # the last member left: no rebalance to wait for
        g.close()
    run(scenario())


def test_a_member_id_handed_out_is_forgotten_after_the_session_timeout():
    async def scenario():
        g, clock = group()
        first = await join(g, session=300)
        assert first[0] == E.MEMBER_ID_REQUIRED and first[5] in g.pending
        await clock.advance(299)
        assert first[5] in g.pending
        await clock.advance(1)
        assert first[5] not in g.pending
        assert (await join(g, first[5], session=300))[0] == E.UNKNOWN_MEMBER_ID
        g.close()
    run(scenario())


def test_two_members_the_followers_sync_waits_for_the_leader():
    async def scenario():
        g, clock = group()
        a = await join_new(g, client="a")
        first = a[5]
        assert g.state == COMPLETING
        # b joins: the group goes back to PreparingRebalance; a must rejoin
        b_join = asyncio.ensure_future(join_new(g, client="b"))
        await until(lambda: g.state == PREPARING)
        assert g.heartbeat(first, None, 1) == E.REBALANCE_IN_PROGRESS
        a2 = await join(g, first, client="a")
        b = await b_join
        assert a2[1] == b[1] == 2 and a2[4] == b[4] == first  # same generation, a leads
        assert len(a2[6]) == 2 and b[6] == []  # only the leader sees the members
        follower = asyncio.ensure_future(g.sync(b[5], None, 2, None, None, []))
        await clock.advance(500)  # well inside every timeout: only the leader's sync releases it
        assert not follower.done()
        assert (await g.sync(first, None, 2, None, None, [(first, b"A"), (b[5], b"B")]))[3] == b"A"
        assert (await follower)[3] == b"B"
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
        await until(lambda: g.state == PREPARING)
        a2 = await join(g, a[5], client="a", session=100)
        b = await b_join
        follower = asyncio.ensure_future(g.sync(b[5], None, b[1], None, None, []))
        for _ in range(8):  # 240 ms: past b's session, a heartbeating
            assert g.heartbeat(a[5], None, a2[1]) == E.NONE
            await clock.advance(30)
        assert b[5] in g.members and not follower.done()
        await g.sync(a[5], None, a2[1], None, None, [(a[5], b"A"), (b[5], b"B")])
        assert (await follower)[3] == b"B" and g.state == STABLE
        for _ in range(3):  # 90 ms after the assignment: b's new session has not run out
            g.heartbeat(a[5], None, g.generation)
            await clock.advance(30)
        assert b[5] in g.members
        g.heartbeat(a[5], None, g.generation)
        await clock.advance(10)
        assert b[5] not in g.members and a[5] in g.members  # b went silent after its assignment
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
        assert {r[3] for r in results} == {"range"}
        bad = await join(g, protocols=[("other", b"")], require_known=False)
        assert bad[0] == E.INCONSISTENT_GROUP_PROTOCOL
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
        assert ra[1] == rb[1] == 1 and {ra[5], rb[5]} == set(g.members)
        g.close()
    run(scenario())


def test_a_quiet_initial_delay_is_not_extended():
    async def scenario():
        g, clock = group(GroupConfig(initial_rebalance_delay_ms=100))
        a = asyncio.ensure_future(join(g, require_known=False))
        await clock.advance(99)
        assert not a.done()
        await clock.advance(1)
        assert (await a)[1] == 1
        g.close()
    run(scenario())


def test_a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance():
    async def scenario():
        g, clock = group()
        a, b = await stable_pair(g, clock, session=200)
        for _ in range(2):  # only a keeps heartbeating
            await clock.advance(90)
            g.heartbeat(a[5], None, 2)
        assert b[5] in g.members and g.state == STABLE  # 180 ms: inside b's session
        await clock.advance(20)
        assert b[5] not in g.members and g.state == PREPARING
        assert g.heartbeat(b[5], None, 2) == E.UNKNOWN_MEMBER_ID
        again = await join(g, a[5], session=200)
        assert again[1] == 3 and [m[0] for m in again[6]] == [a[5]]
        g.close()
    run(scenario())


def test_a_commit_counts_as_a_heartbeat():
    async def scenario():
        g, clock = group()
        a, b = await stable_pair(g, clock, session=200)
        for _ in range(3):
            await clock.advance(150)
            g.heartbeat(a[5], None, 2)
            g.touch(b[5])
        assert set(g.members) == {a[5], b[5]} and g.state == STABLE
        g.close()
    run(scenario())


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped():
    async def scenario():
        g, clock = group()
        a = await join_new(g, session=5000, rebalance=150)
        await g.sync(a[5], None, 1, None, None, [])
        b_join = asyncio.ensure_future(join_new(g, session=5000, rebalance=150))  # a never rejoins
        await clock.advance(149)
        assert not b_join.done() and a[5] in g.members
        await clock.advance(1)
        b = await b_join
        assert b[1] == 2 and a[5] not in g.members and b[4] == b[5]
        g.close()
    run(scenario())


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    async def scenario():
        g, clock = group()
        a = await join_new(g, client="a", session=5000, rebalance=300)
        b_join = asyncio.ensure_future(join_new(g, client="b", session=5000, rebalance=300))
        await until(lambda: g.state == PREPARING)
        a = await join(g, a[5], client="a", session=5000, rebalance=300)
        b = await b_join
        await clock.advance(100)
        await g.sync(a[5], None, 2, None, None, [(a[5], b"A"), (b[5], b"B")])  # b never sends SyncGroup
        assert g.state == STABLE and g.pending_sync == {b[5]}
        await clock.advance(199)
        assert b[5] in g.members
        await clock.advance(1)  # 300 ms after the join completed
        assert b[5] not in g.members and g.state == PREPARING
        g.close()
    run(scenario())


def test_static_member_rejoining_with_a_new_id_fences_the_old_one():
    async def scenario():
        g, clock = group()
        leader = await join(g, instance="i-1", client="a")
        assert leader[0] == E.NONE  # static members skip MEMBER_ID_REQUIRED
        f_join = asyncio.ensure_future(join(g, instance="i-2", client="b"))
        await until(lambda: g.state == PREPARING)
        leader = await join(g, leader[5], instance="i-1", client="a")
        follower = await f_join
        await asyncio.gather(g.sync(leader[5], "i-1", 2, None, None, [(leader[5], b"A"), (follower[5], b"B")]),
                             g.sync(follower[5], "i-2", 2, None, None, []))
        # the follower restarts: same instance id, no member id -> no rebalance, same assignment
        back = await join(g, instance="i-2", client="b")
        assert back[0] == E.NONE and back[1] == 2 and back[5] != follower[5] and g.state == STABLE
        assert (await g.sync(back[5], "i-2", 2, None, None, []))[3] == b"B"
        assert g.heartbeat(follower[5], "i-2", 2) == E.FENCED_INSTANCE_ID
        assert g.leave("", "i-2") == E.NONE and g.state == PREPARING
        g.close()
    run(scenario())


def test_sync_errors():
    async def scenario():
        g, clock = group()
        a = await join_new(g)
        assert (await g.sync(a[5], None, 7, None, None, []))[0] == E.ILLEGAL_GENERATION
        assert (await g.sync("who", None, 1, None, None, []))[0] == E.UNKNOWN_MEMBER_ID
        assert (await g.sync(a[5], None, 1, "consumer", "roundrobin", []))[0] == E.INCONSISTENT_GROUP_PROTOCOL
        g.close()
    run(scenario())


def test_close_stops_every_timer_and_answers_the_waiters():
    async def scenario():
        g, clock = group(GroupConfig(initial_rebalance_delay_ms=100))
        waiting = asyncio.ensure_future(join(g, require_known=False))
        pending = await join(g, session=300)
        await settle()
        g.close()
        assert (await waiting)[0] == E.NOT_COORDINATOR
        assert all(timer.cancelled for _, _, timer in clock.timers) and pending[5] not in g.pending
        await clock.advance(10_000)  # nothing left to fire
        assert g.generation == 0
    run(scenario())


def test_the_live_clock_arms_loop_timers_in_milliseconds():
    async def scenario():
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        handle = LoopClock().call_later(1500, fired.set_result, "late")
        assert handle.when() - loop.time() == pytest.approx(1.5, abs=0.2)
        handle.cancel()
        LoopClock().call_later(0, fired.set_result, "now")
        assert await fired == "now"
        assert abs(LoopClock().now_ms() - time.time() * 1000) < 1000
    run(scenario())


# --- the coordinator over a real log -------------------------------------------------------
def make_coordinator(tmp_path, leads=None, **overrides):
    props = {"offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0", **overrides}
    config = BrokerConfig.from_sources(overrides=props)
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir, exist_ok=True)
    topics = TopicRegistry([log_dir], LogConfig())
    logs = LogManager([log_dir], LogConfig(), config_for=topics.config_for).open(clean_shutdown=True)
    service = PartitionService(logs, topics)
    return GroupCoordinator(service, topics, config, 0, 1, leads=leads), topics, logs


def test_commits_and_group_metadata_survive_a_reload(tmp_path):
    async def first():
        c, topics, logs = make_coordinator(tmp_path)
        topics.create("events", 2)
        j = await c.join_group("g", "", None, "cli", "/h", 6000, 6000, "consumer", PROTOCOLS, False)
        await c.sync_group("g", 1, j[5], None, None, None, [(j[5], b"assign")])
        assert await c.offset_commit("g", 1, j[5], None, [("events", 0, 10, 3, "meta"), ("events", 1, 20, 3, None)], 9) \
            == [("events", 0, E.NONE), ("events", 1, E.NONE)]
        assert await c.offset_commit("g", 5, j[5], None, [("events", 0, 11, 3, "")], 9) == [("events", 0, E.ILLEGAL_GENERATION)]
        assert await c.offset_commit("simple", -1, "", None, [("events", 0, 5, -1, "")], 9) == [("events", 0, E.NONE)]
        assert (await c.offset_commit("nogroup", 3, "m", None, [("events", 0, 5, -1, "")], 9))[0][2] == E.GROUP_ID_NOT_FOUND
        assert (await c.offset_commit("nogroup", 3, "m", None, [("events", 0, 5, -1, "")], 8))[0][2] == E.ILLEGAL_GENERATION
        assert c.delete_group("g") == E.NON_EMPTY_GROUP
        assert c.delete_group("simple") == E.NONE
        assert c.delete_group("simple") == E.GROUP_ID_NOT_FOUND
        assert topics.get("__consumer_offsets").configs["cleanup.policy"] == "compact"
        c.close()
        logs.close()
        return j[5]

    async def second(member_id):
        c, topics, logs = make_coordinator(tmp_path)
        c.start()
        assert c.offset_fetch("g", None, False)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        await until(lambda: c.offset_fetch("g", None, False)[0] != E.COORDINATOR_LOAD_IN_PROGRESS)
        assert c.offset_fetch("g", None, True) == (E.NONE, [("events", 0, 10, 3, "meta", E.NONE),
                                                             ("events", 1, 20, 3, "", E.NONE)])
        assert c.offset_fetch("g", [("events", [0, 5])], False)[1][1] == ("events", 5, -1, -1, "", E.NONE)
        error, state, ptype, pdata, members = c.describe_group("g")
        assert (error, state, ptype, pdata) == (E.NONE, STABLE, "consumer", "range")
        assert [(m[0], m[5]) for m in members] == [(member_id, b"assign")]
        assert c.describe_group("simple")[0] == E.GROUP_ID_NOT_FOUND
        assert c.heartbeat("g", 1, member_id, None) == E.NONE  # members resume after a coordinator move
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
        topics.create("events", 1)
        assert await c.offset_commit("g", -1, "", None, [("events", 0, 10, -1, "")], 9) == [("events", 0, E.NONE)]
        c.close()
        logs.close()

    async def second():
        c, topics, logs = make_coordinator(tmp_path)
        c.start()
        await asyncio.sleep(0)  # each load replays its first chunk, then yields
        assert p in c._loading
        c.leadership_changed(p, True)
        await until(lambda: not c._loading)
        assert c.offset_fetch("g", None, False) == (E.NONE, [("events", 0, 10, -1, "", E.NONE)])
        c.close()
        logs.close()

    run(first())
    run(second())


def test_a_worker_replays_only_the_offsets_partitions_it_leads(tmp_path):
    async def first():
        c, topics, logs = make_coordinator(tmp_path)
        topics.create("events", 1)
        for group_id in ("g", "h"):
            await c.offset_commit(group_id, -1, "", None, [("events", 0, 10, -1, "")], 9)
        c.close()
        logs.close()

    async def second():
        leading = {group_partition("g", 4)}
        c, topics, logs = make_coordinator(tmp_path, leads=lambda topic, partition: partition in leading)
        c.start()
        await until(lambda: not c._loading)
        assert set(c.groups) == {"g"}  # h's partition is another broker's: nothing of it here
        assert c.offset_fetch("h", None, False)[0] == E.NOT_COORDINATOR
        leading.add(group_partition("h", 4))
        c.leadership_changed(group_partition("h", 4), True)
        assert c.offset_fetch("h", None, False) == (E.NONE, [("events", 0, 10, -1, "", E.NONE)])
        c.close()
        logs.close()

    assert group_partition("g", 4) != group_partition("h", 4)
    run(first())
    run(second())


def test_offset_delete_and_expiry(tmp_path):
    async def scenario():
        c, topics, logs = make_coordinator(tmp_path, **{"offsets.retention.minutes": "1"})
        topics.create("events", 1)
        await c.offset_commit("g", -1, "", None, [("events", 0, 10, -1, "")], 9)
        await c.offset_commit("h", -1, "", None, [("events", 0, 1, -1, "")], 9)
        assert c.offset_delete("g", [("events", 0)]) == (E.NONE, [("events", 0, E.NONE)])
        assert c.offset_fetch("g", [("events", [0])], False)[1][0][2] == -1
        assert c.offset_delete("zzz", [("events", 0)])[0] == E.GROUP_ID_NOT_FOUND
        assert c.expire_offsets(now_ms()) == 0
        assert c.expire_offsets(now_ms() + 61_000) == 1  # h's commit is older than the retention
        assert "h" not in c.groups and "g" not in c.groups  # empty groups without offsets go too
        c.close()
        logs.close()
    run(scenario())


def test_session_timeout_bounds_and_ownership(tmp_path):
    async def scenario():
        c, topics, logs = make_coordinator(tmp_path)
        assert (await c.join_group("g", "", None, "c", "/h", 10, 10, "consumer", PROTOCOLS, True))[0] \
            == E.INVALID_SESSION_TIMEOUT
        assert (await c.join_group("g", "unknown", None, "c", "/h", 6000, 6000, "consumer", PROTOCOLS, True))[0] \
            == E.UNKNOWN_MEMBER_ID
        assert (await c.join_group("", "", None, "c", "/h", 6000, 6000, "consumer", PROTOCOLS, True))[0] \
            == E.INVALID_GROUP_ID
        c.workers = 2  # pretend another worker owns half the partitions
        foreign = next(g for g in (f"g{i}" for i in range(100))
                       if c._check(g) == E.NOT_COORDINATOR)
        assert c.heartbeat(foreign, 1, "m", None) == E.NOT_COORDINATOR
        c.close()
        logs.close()
    run(scenario())


def test_a_restarted_static_leader_gets_no_leadership_and_no_rebalance():
    async def scenario():
        g, clock = group()
        leader = await join(g, instance="i-1")
        await g.sync(leader[5], "i-1", 1, None, None, [(leader[5], b"A")])
        back = await join(g, instance="i-1")
        # the answer names the previous leader id, so the client does not assign
        assert back[0] == E.NONE and back[1] == 1 and back[4] == leader[5] != back[5] and back[6] == []
        assert g.leader == back[5] and g.state == STABLE
        assert (await g.sync(back[5], "i-1", 1, None, None, []))[3] == b"A"
        g.close()
    run(scenario())
