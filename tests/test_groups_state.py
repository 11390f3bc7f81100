"""The group state machine and the coordinator over a real log, in one event loop:
join/sync/heartbeat/leave, timeouts, fencing, and reload from ``__consumer_offsets``."""

import asyncio
import os


from hpbroker.protocol import errors as E
from hpbroker.server.config import BrokerConfig
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.groups import GroupCoordinator
from hpbroker.workers.groups.state import COMPLETING, EMPTY, PREPARING, STABLE, Group, GroupConfig
from hpbroker.workers.partitions import PartitionService
from hpbroker.workers.topics import TopicRegistry

NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)
PROTOCOLS = [("range", b"r"), ("roundrobin", b"rr")]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def until(condition, timeout: float = 2.0):
    """Let the loop run until ``condition()`` holds (a state change another task makes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def settle():
    """Give every ready task its turn, to show that something does not happen."""
    for _ in range(20):
        await asyncio.sleep(0)


async def join(group, member_id="", *, client="c", session=1000, rebalance=1000, protocols=PROTOCOLS,
               instance=None, require_known=True):
    return await group.join(member_id, instance, client, "/127.0.0.1", session, rebalance, "consumer", protocols,
                            require_known)


async def join_new(group, **kw):
    """The v4+ two-step join: MEMBER_ID_REQUIRED, then join with the id."""
    first = await join(group, **kw)
    assert first[0] == E.MEMBER_ID_REQUIRED and first[5]
    return await join(group, first[5], **kw)


def test_member_id_required_then_a_single_member_group_completes():
    async def scenario():
        g = Group("g", NO_DELAY)
        error, generation, ptype, pname, leader, member_id, members, _ = await join_new(g)
        assert (error, generation, ptype, pname, leader) == (E.NONE, 1, "consumer", "range", member_id)
        assert members == [(member_id, None, b"r")]
        assert g.state == COMPLETING
        assert await g.sync(member_id, None, 1, "consumer", "range", [(member_id, b"A")]) == (
            E.NONE, "consumer", "range", b"A")
        assert g.state == STABLE
        assert g.heartbeat(member_id, None, 1) == E.NONE
        assert g.heartbeat(member_id, None, 0) == E.ILLEGAL_GENERATION
        assert g.heartbeat("nobody", None, 1) == E.UNKNOWN_MEMBER_ID
        assert g.leave(member_id, None) == E.NONE
        await until(lambda: g.state == EMPTY)
        assert g.generation == 2
        g.close()
    run(scenario())


def test_two_members_the_followers_sync_waits_for_the_leader():
    async def scenario():
        g = Group("g", NO_DELAY)
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
        await settle()
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
        g = Group("g", NO_DELAY)
        a = await join_new(g, client="a", session=100)
        b_join = asyncio.ensure_future(join_new(g, client="b", session=100))
        await until(lambda: g.state == PREPARING)
        a2 = await join(g, a[5], client="a", session=100)
        b = await b_join
        follower = asyncio.ensure_future(g.sync(b[5], None, b[1], None, None, []))
        started = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - started < 0.25:  # past b's session, a heartbeating
            assert g.heartbeat(a[5], None, a2[1]) == E.NONE
            await asyncio.sleep(0.03)
        await g.sync(a[5], None, a2[1], None, None, [(a[5], b"A"), (b[5], b"B")])
        assert (await follower)[3] == b"B" and g.state == STABLE

        async def leader_alive():
            while True:
                g.heartbeat(a[5], None, g.generation)
                await asyncio.sleep(0.03)

        keep = asyncio.ensure_future(leader_alive())
        await until(lambda: b[5] not in g.members, timeout=1.0)  # b went silent after its assignment
        keep.cancel()
        g.close()
    run(scenario())


def test_protocol_with_most_votes_among_common_ones_wins():
    async def scenario():
        g = Group("g", GroupConfig(initial_rebalance_delay_ms=50))
        joins = [asyncio.ensure_future(join(g, protocols=p, require_known=False)) for p in (
            [("roundrobin", b""), ("range", b""), ("sticky", b"")],
            [("range", b""), ("roundrobin", b"")],
            [("sticky", b""), ("range", b""), ("roundrobin", b"")])]
        results = await asyncio.gather(*joins)
        # sticky is not common; range has 2 first-choice votes among {range, roundrobin}
        assert {r[3] for r in results} == {"range"}
        bad = await join(g, protocols=[("other", b"")], require_known=False)
        assert bad[0] == E.INCONSISTENT_GROUP_PROTOCOL
        g.close()
    run(scenario())


def test_initial_rebalance_delay_gathers_members_into_one_generation():
    async def scenario():
        g = Group("g", GroupConfig(initial_rebalance_delay_ms=100))
        loop = asyncio.get_running_loop()
        start = loop.time()
        a = asyncio.ensure_future(join(g, require_known=False))
        await asyncio.sleep(0.05)
        b = asyncio.ensure_future(join(g, require_known=False))
        ra, rb = await a, await b
        assert ra[1] == rb[1] == 1 and loop.time() - start >= 0.1
        g.close()
    run(scenario())


def test_a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance():
    async def scenario():
        g = Group("g", NO_DELAY)
        a = await join_new(g, session=200)
        b_join = asyncio.ensure_future(join_new(g, session=200))
        await until(lambda: g.state == PREPARING)
        a = await join(g, a[5], session=200)
        b = await b_join
        await asyncio.gather(g.sync(a[5], None, 2, None, None, [(a[5], b"A"), (b[5], b"B")]),
                             g.sync(b[5], None, 2, None, None, []))
        assert g.state == STABLE
        for _ in range(5):  # only a keeps heartbeating
            await asyncio.sleep(0.08)
            g.heartbeat(a[5], None, 2)
        assert b[5] not in g.members and g.state == PREPARING
        assert g.heartbeat(b[5], None, 2) == E.UNKNOWN_MEMBER_ID
        again = await join(g, a[5], session=200)
        assert again[1] == 3 and [m[0] for m in again[6]] == [a[5]]
        g.close()
    run(scenario())


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped():
    async def scenario():
        g = Group("g", NO_DELAY)
        a = await join_new(g, session=5000, rebalance=150)
        await g.sync(a[5], None, 1, None, None, [])
        b = await asyncio.wait_for(join_new(g, session=5000, rebalance=150), 2)  # a never rejoins
        assert b[1] == 2 and a[5] not in g.members and b[4] == b[5]
        g.close()
    run(scenario())


def test_static_member_rejoining_with_a_new_id_fences_the_old_one():
    async def scenario():
        g = Group("g", NO_DELAY)
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
        g = Group("g", NO_DELAY)
        a = await join_new(g)
        assert (await g.sync(a[5], None, 7, None, None, []))[0] == E.ILLEGAL_GENERATION
        assert (await g.sync("who", None, 1, None, None, []))[0] == E.UNKNOWN_MEMBER_ID
        assert (await g.sync(a[5], None, 1, "consumer", "roundrobin", []))[0] == E.INCONSISTENT_GROUP_PROTOCOL
        g.close()
    run(scenario())


# --- the coordinator over a real log -------------------------------------------------------
def make_coordinator(tmp_path, **overrides):
    props = {"offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0", **overrides}
    config = BrokerConfig.from_sources(overrides=props)
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir, exist_ok=True)
    topics = TopicRegistry([log_dir], LogConfig())
    logs = LogManager([log_dir], LogConfig(), topic_config=topics.topic_configs).open(clean_shutdown=True)
    service = PartitionService(logs, topics)
    service.groups = GroupCoordinator(service, topics, config, 0, 1)
    return service, topics, logs


def test_commits_and_group_metadata_survive_a_reload(tmp_path):
    async def first():
        service, topics, logs = make_coordinator(tmp_path)
        topics.create("events", 2)
        c = service.groups
        j = await c.join_group("g", "", None, "cli", "/h", 6000, 6000, "consumer", PROTOCOLS, False)
        await c.sync_group("g", 1, j[5], None, None, None, [(j[5], b"assign")])
        assert c.offset_commit("g", 1, j[5], None, [("events", 0, 10, 3, "meta"), ("events", 1, 20, 3, None)], 9) \
            == [("events", 0, E.NONE), ("events", 1, E.NONE)]
        assert c.offset_commit("g", 5, j[5], None, [("events", 0, 11, 3, "")], 9) == [("events", 0, E.ILLEGAL_GENERATION)]
        assert c.offset_commit("simple", -1, "", None, [("events", 0, 5, -1, "")], 9) == [("events", 0, E.NONE)]
        assert c.offset_commit("nogroup", 3, "m", None, [("events", 0, 5, -1, "")], 9)[0][2] == E.GROUP_ID_NOT_FOUND
        assert c.offset_commit("nogroup", 3, "m", None, [("events", 0, 5, -1, "")], 8)[0][2] == E.ILLEGAL_GENERATION
        assert c.delete_group("g") == E.NON_EMPTY_GROUP
        assert c.delete_group("simple") == E.NONE
        assert c.delete_group("simple") == E.GROUP_ID_NOT_FOUND
        assert topics.get("__consumer_offsets").configs["cleanup.policy"] == "compact"
        c.close()
        logs.close()
        return j[5]

    async def second(member_id):
        service, topics, logs = make_coordinator(tmp_path)
        c = service.groups
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


def test_offset_delete_and_expiry(tmp_path):
    async def scenario():
        service, topics, logs = make_coordinator(tmp_path, **{"offsets.retention.minutes": "1"})
        topics.create("events", 1)
        c = service.groups
        c.offset_commit("g", -1, "", None, [("events", 0, 10, -1, "")], 9)
        c.offset_commit("h", -1, "", None, [("events", 0, 1, -1, "")], 9)
        assert c.offset_delete("g", [("events", 0)]) == (E.NONE, [("events", 0, E.NONE)])
        assert c.offset_fetch("g", [("events", [0])], False)[1][0][2] == -1
        assert c.offset_delete("zzz", [("events", 0)])[0] == E.GROUP_ID_NOT_FOUND
        from hpbroker.workers.groups.state import now_ms
        assert c.expire_offsets(now_ms()) == 0
        assert c.expire_offsets(now_ms() + 61_000) == 1  # h's commit is older than the retention
        assert "h" not in c.groups and "g" not in c.groups  # empty groups without offsets go too
        c.close()
        logs.close()
    run(scenario())


def test_session_timeout_bounds_and_ownership(tmp_path):
    async def scenario():
        service, topics, logs = make_coordinator(tmp_path)
        c = service.groups
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
        g = Group("g", NO_DELAY)
        leader = await join(g, instance="i-1")
        await g.sync(leader[5], "i-1", 1, None, None, [(leader[5], b"A")])
        back = await join(g, instance="i-1")
        # the answer names the previous leader id, so the client does not assign
        assert back[0] == E.NONE and back[1] == 1 and back[4] == leader[5] != back[5] and back[6] == []
        assert g.leader == back[5] and g.state == STABLE
        assert (await g.sync(back[5], "i-1", 1, None, None, []))[3] == b"A"
        g.close()
    run(scenario())
