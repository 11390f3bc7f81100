"""A consumer group of the consumer protocol (KIP-848), heartbeat by heartbeat:
joins, revocation before reassignment, fencing, timeouts, subscriptions that
change, and the commit rules; and the two server-side assignors.

The group runs on a ``FakeClock``; its topics are a dict the test changes."""

import asyncio
import itertools
import random
import uuid

from harness.fake_clock import FakeClock
from hpbroker.errors import ErrorCode
from hpbroker.workers.groups import assignors
from hpbroker.workers.groups.consumer_group import ConsumerGroup, ConsumerGroupConfig, MemberState, TopicView
from hpbroker.workers.owner_calls import ConsumerGroupHeartbeat

ORDERS, PAYMENTS = uuid.UUID(int=1), uuid.UUID(int=2)
CONFIG = ConsumerGroupConfig(session_ms=45_000, heartbeat_ms=5_000)


def setup(orders: int = 4, payments: int = 0):
    topics = {"orders": TopicView(ORDERS, "orders", orders)}
    if payments:
        topics["payments"] = TopicView(PAYMENTS, "payments", payments)
    clock = FakeClock()
    return ConsumerGroup("g", CONFIG, lambda: dict(topics), clock), topics, clock


def beat(group, member, epoch, *, topics=None, regex=None, owned=None, assignor=None, rebalance_ms=30_000,
         instance=None):
    return group.heartbeat(ConsumerGroupHeartbeat("g", member, epoch, instance, None,
                                                  rebalance_ms if epoch == 0 else -1, topics, regex, assignor, owned,
                                                  "client", "/127.0.0.1"))


def join(group, member, topics=("orders",), **kw):
    return beat(group, member, 0, topics=list(topics), owned=[], **kw)


def parts(answer, topic_id=ORDERS) -> set[int]:
    assert answer.assignment is not None, "no assignment in the answer"
    return {p for t, ps in answer.assignment for p in ps if t == topic_id}


def owned(*partitions, topic_id=ORDERS):
    return [(topic_id, sorted(partitions))]


def no_partition_twice(group) -> None:
    seen: dict = {}
    for m in group.members.values():
        for assignment in (m.assigned, m.revoking):
            for t, ps in assignment.items():
                for p in ps:
                    assert (t, p) not in seen, f"{(t, p)} held by {seen[(t, p)]} and {m.member_id}"
                    seen[(t, p)] = m.member_id


def settled_pair(instance_of_b: str | None = "b-static"):
    """a and b (b static unless told otherwise) share the topic, each stable with two partitions."""
    g, topics, clock = setup()
    join(g, "a")
    join(g, "b", instance=instance_of_b)
    kept = parts(beat(g, "a", 1))
    beat(g, "a", 1, owned=owned(*kept))
    b = beat(g, "b", 2)
    return g, clock, kept, parts(b)


def test_a_lone_member_gets_every_partition_at_epoch_one():
    g, _, _ = setup()
    answer = join(g, "a")
    assert (answer.error, answer.member_id, answer.member_epoch) == (ErrorCode.none, "a", 1)
    assert parts(answer) == {0, 1, 2, 3} and answer.heartbeat_ms == 5_000
    assert g.state_name == "Stable"
    quiet = beat(g, "a", 1)
    assert quiet.error == ErrorCode.none and quiet.assignment is None  # nothing changed: nothing sent


def test_the_assignment_is_sent_when_it_changed_or_the_member_sent_its_whole_state():
    g, _, _ = setup()
    join(g, "a")
    assert beat(g, "a", 1, owned=owned(0, 1, 2, 3)).assignment is None  # an ack of what it has
    whole = g.heartbeat(ConsumerGroupHeartbeat("g", "a", 1, None, None, 30_000, ["orders"], None, None,
                                               owned(0, 1, 2, 3), "client", "/127.0.0.1"))
    assert parts(whole) == {0, 1, 2, 3}  # after a coordinator change, say: it gets its state back


def test_partitions_move_only_after_their_owner_gave_them_up():
    g, _, _ = setup()
    join(g, "a")
    b = join(g, "b")
    assert b.member_epoch == 2 and parts(b) == set()  # b's half is still a's
    assert g.members["b"].state == MemberState.UNRELEASED and g.state_name == "Reconciling"
    a = beat(g, "a", 1)
    kept = parts(a)
    assert a.member_epoch == 1 and len(kept) == 2  # told to give up two, at its old epoch
    no_partition_twice(g)
    assert beat(g, "b", 2).assignment is None  # a has not confirmed yet: nothing new for b
    a = beat(g, "a", 1, owned=owned(*kept))
    assert a.member_epoch == 2
    b = beat(g, "b", 2)
    assert parts(b) == {0, 1, 2, 3} - kept and g.members["b"].state == MemberState.STABLE
    assert g.state_name == "Stable"
    no_partition_twice(g)


def test_a_member_that_already_dropped_its_partitions_moves_on_at_once():
    g, _, _ = setup()
    join(g, "a")
    join(g, "b")
    a = beat(g, "a", 1, owned=[])  # it says it owns nothing any more (a client that lost its partitions)
    assert a.member_epoch == 2 and len(parts(a)) == 2


def test_epochs_ahead_or_behind_are_fenced_but_a_lost_answer_is_forgiven():
    g, _, _ = setup()
    join(g, "a")
    assert beat(g, "a", 5).error == ErrorCode.fenced_member_epoch
    join(g, "b")
    kept = parts(beat(g, "a", 1))
    a = beat(g, "a", 1, owned=owned(*kept))
    assert a.member_epoch == 2
    # the answer with epoch 2 was lost: the member heartbeats at 1 again, owning only what it kept
    again = beat(g, "a", 1, owned=owned(*kept))
    assert again.error == ErrorCode.none and again.member_epoch == 2
    assert beat(g, "a", 1, owned=owned(0, 1, 2, 3)).error == ErrorCode.fenced_member_epoch
    assert beat(g, "a", 1).error == ErrorCode.fenced_member_epoch  # the old epoch, without its owned partitions


def test_an_unknown_member_is_told_so_and_may_join_again():
    g, _, _ = setup()
    assert beat(g, "ghost", 3).error == ErrorCode.unknown_member_id
    join(g, "a")
    rejoined = join(g, "a")  # fenced, it joins again with epoch 0 under the same id
    assert rejoined.member_epoch == 2 and parts(rejoined) == {0, 1, 2, 3}


def test_a_leaving_member_frees_its_partitions():
    g, _, _, _ = settled_pair(None)
    left = beat(g, "a", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    b = beat(g, "b", 2)
    assert b.member_epoch == 3 and parts(b) == {0, 1, 2, 3}
    beat(g, "b", -1)
    assert g.state_name == "Empty" and not g.holders


def test_a_silent_member_is_removed_after_its_session_timeout():
    g, clock, _, _ = settled_pair(None)

    async def later():
        for _ in range(10):  # b keeps beating, a falls silent
            await clock.advance(5_000)
            beat(g, "b", g.members["b"].epoch)
    asyncio.run(later())
    assert set(g.members) == {"b"} and g.members["b"].assigned == {ORDERS: {0, 1, 2, 3}}


def test_a_member_that_keeps_revoked_partitions_past_its_rebalance_timeout_is_removed():
    g, _, clock = setup()
    join(g, "a", rebalance_ms=10_000)
    join(g, "b")
    beat(g, "a", 1)  # told to give up two; it never confirms
    asyncio.run(clock.advance(10_000))
    assert set(g.members) == {"b"}
    assert parts(beat(g, "b", g.members["b"].epoch)) == {0, 1, 2, 3}


def test_new_partitions_and_new_topics_reach_the_members():
    g, topics, _ = setup(orders=2)
    answer = beat(g, "a", 0, topics=["orders"], regex=None, owned=[])
    assert parts(answer) == {0, 1}
    topics["orders"] = TopicView(ORDERS, "orders", 3)
    grown = beat(g, "a", 1)
    assert grown.member_epoch == 2 and parts(grown) == {0, 1, 2}
    r, _, _ = setup(orders=1)
    first = beat(r, "x", 0, topics=None, regex="pay.*|orders", owned=[])
    assert parts(first) == {0}
    r.topics = lambda: {"orders": TopicView(ORDERS, "orders", 1), "payments": TopicView(PAYMENTS, "payments", 2),
                        "__consumer_offsets": TopicView(uuid.UUID(int=9), "__consumer_offsets", 50, internal=True)}
    later = beat(r, "x", 1)
    assert parts(later, PAYMENTS) == {0, 1} and parts(later) == {0}
    everything = beat(r, "x", 2, regex=".*")
    assert not {t for t, _ in everything.assignment or []} - {ORDERS, PAYMENTS}  # internal topics never by regex


def test_a_subscription_regex_is_re2s_and_cannot_stall_the_coordinator():
    g, topics, _ = setup()
    topics["a" * 200] = TopicView(PAYMENTS, "a" * 200, 1)
    answer = beat(g, "x", 0, regex="(a+)+b", owned=[])  # exponential for a backtracking engine
    assert answer.error == ErrorCode.none and parts(answer, PAYMENTS) == set()
    bad = beat(g, "y", 0, regex="orders(", owned=[])
    assert bad.error == ErrorCode.invalid_regular_expression and "missing )" in (bad.message or "")


def test_a_static_member_back_within_its_session_takes_its_partitions_over():
    g, _, kept, b_parts = settled_pair()
    epoch = g.group_epoch
    left = beat(g, "b", -2, instance="b-static")
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    assert beat(g, "a", 2).assignment is None  # b's partitions stay parked for it
    back = join(g, "b2", instance="b-static")  # the restarted process: a new member id, the same instance
    assert back.error == ErrorCode.none and parts(back) == b_parts
    assert g.group_epoch == epoch and set(g.members) == {"a", "b2"}  # nothing was reassigned
    no_partition_twice(g)


def test_a_static_members_parked_partitions_go_once_its_session_runs_out():
    g, clock, kept, b_parts = settled_pair()
    beat(g, "b", -2, instance="b-static")

    async def later():
        for _ in range(10):
            await clock.advance(5_000)
            beat(g, "a", g.members["a"].epoch)
    asyncio.run(later())
    assert set(g.members) == {"a"} and g.members["a"].assigned == {ORDERS: {0, 1, 2, 3}}


def test_an_instance_id_is_one_member_at_a_time():
    g, _, _, _ = settled_pair()
    assert join(g, "b2", instance="b-static").error == ErrorCode.unreleased_instance_id  # b is still there
    assert beat(g, "b2", -2, instance="b-static").error == ErrorCode.fenced_instance_id
    assert beat(g, "x", -2, instance="nobody").error == ErrorCode.unknown_member_id
    assert beat(g, "b", -1, instance="b-static").error == ErrorCode.none  # -1: gone for good
    assert "b-static" not in g.static and join(g, "b2", instance="b-static").error == ErrorCode.none


def test_a_second_revocation_gets_a_whole_rebalance_timeout():
    g, _, clock = setup(orders=6)
    join(g, "a", rebalance_ms=10_000)
    join(g, "b")
    kept = parts(beat(g, "a", 1))  # told to give up three at t=0

    async def later():
        await clock.advance(8_000)
        join(g, "c")
        kept_now = parts(beat(g, "a", 1, owned=owned(*kept)))  # gave them up; now told to give up more
        assert g.members["a"].state == MemberState.UNREVOKED and len(kept_now) == 2
        await clock.advance(9_000)  # 17 s from the first revocation, 9 s into the second
        assert "a" in g.members
        await clock.advance(1_000)
        assert "a" not in g.members  # the second one's timeout, not the first's
    asyncio.run(later())


def test_a_static_member_that_left_is_fenced_at_its_old_epoch_and_gets_its_partitions_back_under_its_own_id():
    g, _, kept, b_parts = settled_pair()
    b_epoch = g.members["b"].epoch
    beat(g, "b", -2, instance="b-static")
    stale = beat(g, "b", b_epoch, owned=owned(*b_parts))
    assert stale.error == ErrorCode.fenced_member_epoch  # it left: its old epoch is no longer its own
    epoch = g.group_epoch
    back = join(g, "b", instance="b-static")
    assert parts(back) == b_parts and g.group_epoch == epoch


def test_bad_assignor_or_regex_is_refused():
    g, _, _ = setup()
    assert join(g, "a", assignor="sticky").error == ErrorCode.unsupported_assignor
    assert beat(g, "a", 0, regex="(", owned=[]).error == ErrorCode.invalid_regular_expression
    assert join(g, "a", assignor="range").error == ErrorCode.none and g.assignor_name == "range"


def test_commits_must_carry_the_members_epoch():
    g, _, _ = setup()
    assert g.commit_error("", -1, 9) == ErrorCode.none  # an empty group takes a commit from outside
    join(g, "a")
    assert g.commit_error("a", 1, 9) == ErrorCode.none
    assert g.commit_error("a", 0, 9) == ErrorCode.stale_member_epoch
    assert g.commit_error("a", 2, 9) == ErrorCode.stale_member_epoch
    assert g.commit_error("a", 1, 8) == ErrorCode.unsupported_version  # this protocol commits with v9+
    assert g.commit_error("b", 1, 9) == ErrorCode.unknown_member_id
    assert g.commit_error("", -1, 9) == ErrorCode.unknown_member_id  # not while it has members
    assert g.check_member("a", None, 0) == ErrorCode.illegal_generation  # TxnOffsetCommit's word for it
    assert g.check_member("a", None, 1) == ErrorCode.none


def test_describe_shows_each_members_assignment_and_target():
    g, _, _ = setup()
    join(g, "a")
    join(g, "b")
    d = g.describe_consumers()
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor) == ("Reconciling", 2, 2, "uniform")
    by_id = {m.member_id: m for m in d.members}
    assert by_id["b"].assignment == [] and by_id["b"].target[0][1] == "orders"
    assert len(by_id["b"].target[0][2]) == 2 and by_id["a"].member_epoch == 1


# --- the assignors ------------------------------------------------------------------------
def test_uniform_balances_and_keeps_partitions_where_they_were():
    subs = {m: {ORDERS} for m in "abc"}
    first = assignors.uniform(subs, {ORDERS: 7}, {})
    sizes = sorted(len(first[m].get(ORDERS, ())) for m in "abc")
    assert sizes == [2, 2, 3]
    subs["d"] = {ORDERS}
    second = assignors.uniform(subs, {ORDERS: 7}, first)
    assert sorted(len(second[m].get(ORDERS, ())) for m in "abcd") == [1, 2, 2, 2]
    moved = sum(len(first[m][ORDERS] - second[m].get(ORDERS, set())) for m in "abc")
    assert moved == 1  # only what the newcomer needed


def test_uniform_gives_each_topic_only_to_its_subscribers():
    subs = {"a": {ORDERS}, "b": {ORDERS, PAYMENTS}}
    result = assignors.uniform(subs, {ORDERS: 4, PAYMENTS: 4}, {})
    assert PAYMENTS not in result["a"] and result["b"][PAYMENTS] == {0, 1, 2, 3}
    assert result["a"][ORDERS] == {0, 1, 2, 3}  # balanced: 4 and 4


def test_uniform_passes_work_along_members_that_read_different_topics():
    t1, t2 = ORDERS, PAYMENTS
    result = assignors.uniform({"a": {t2}, "b": {t1, t2}, "c": {t1}}, {t1: 1, t2: 2}, {})
    assert sorted(sum(map(len, result[m].values())) for m in "abc") == [1, 1, 1]
    stuck = {"a": {t2: {0, 1}}, "b": {t1: {0}}, "c": {}}  # from a previous assignment that left c idle
    moved = assignors.uniform({"a": {t2}, "b": {t1, t2}, "c": {t1}}, {t1: 1, t2: 2}, stuck)
    assert moved["c"] == {t1: {0}} and len(moved["b"].get(t2, ())) == 1


def test_uniform_finds_the_best_balance_of_small_groups():
    """Against every possible assignment of small random groups: the most any
    member holds, and the spread (sum of squares), are the least possible."""
    rng = random.Random(848)
    topics = [uuid.UUID(int=i) for i in range(1, 4)]
    for _ in range(150):
        members = [f"m{i}" for i in range(rng.randint(2, 4))]
        subs = {m: {t for t in topics if rng.random() < 0.6} for m in members}
        sizes = {t: rng.randint(0, 3) for t in topics if any(t in s for s in subs.values())}
        keys = [(t, p) for t, n in sizes.items() for p in range(n)]
        result = assignors.uniform(subs, sizes, {})
        counts = [sum(map(len, result[m].values())) for m in members]
        assert sum(counts) == len(keys)
        best_max, best_squares = len(keys), len(keys) ** 2
        for choice in itertools.product(*[[m for m in members if t in subs[m]] for t, _ in keys]):
            load = [choice.count(m) for m in members]
            best_max, best_squares = min(best_max, max(load)), min(best_squares, sum(x * x for x in load))
        assert max(counts, default=0) == best_max and sum(x * x for x in counts) == best_squares, (subs, sizes)


def test_range_gives_contiguous_runs_in_member_order():
    subs = {"b": {ORDERS, PAYMENTS}, "a": {ORDERS, PAYMENTS}}
    result = assignors.range_(subs, {ORDERS: 5, PAYMENTS: 5}, {})
    assert result["a"] == {ORDERS: {0, 1, 2}, PAYMENTS: {0, 1, 2}}
    assert result["b"] == {ORDERS: {3, 4}, PAYMENTS: {3, 4}}
