"""The ZooKeeper-coordinated consumer against a real ZooKeeper and real
cluster-mode brokers: the range split among one, two and three members,
a member SIGKILLed (its share moves once its session expires), a broker
added, a leader killed, a topic matching a pattern, offsets resumed after
every member restarts, a group moved to Kafka storage by dual commit and
read on by a confluent-kafka group consumer from the same place, and the
console consumer as a member of such a group."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.broker import REPO
from harness.cluster import Cluster
from harness.waiting import wait_for
from hpbroker.cluster import znodes
from hpbroker.cluster.consumer_registry import ConsumerIdInUse
from hpbroker.zkconsumer import ZookeeperConsumer
from tests.integration.test_cli_admin import failed, ok

SESSION_MS = 4000  # the consumers' ZooKeeper session: how long a killed member holds its share
FAST: dict[str, Any] = {"zookeeper_session_timeout_ms": SESSION_MS, "rebalance_backoff_ms": 500,
                        "rebalance_max_retries": 10}


@pytest.fixture
def brokers(chroot, tmp_path):
    """Two brokers of three started (a test may start the third)."""
    found = Cluster(chroot, tmp_path, 3)
    for broker in (found.brokers[1], found.brokers[2]):
        broker.start(wait=False)
    for broker_id in (1, 2):
        wait_for(found.brokers[broker_id]._ready, 60, f"broker {broker_id} to answer")
    wait_for(lambda: found.registered() == {1, 2}, 60, "both brokers to register")
    yield found
    found.close()


def bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.brokers[b].bootstrap for b in sorted(cluster.registered()))


def create(cluster: Cluster, topic: str, partitions: int, replicas: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    admin.create_topics([NewTopic(topic, partitions, replicas)])[topic].result(30)
    wait_for(lambda: all(cluster.zk.exists(znodes.partition_state_path(topic, p)) and
                         cluster.state(topic, p).leader >= 0 for p in range(partitions)), 60,
             f"every partition of {topic} to have a leader")


def produce(cluster: Cluster, topic: str, partitions: int, per_partition: int, start: int = 0) -> set[bytes]:
    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 5})
    values = set()
    for p in range(partitions):
        for i in range(start, start + per_partition):
            value = b"%s-%d-%d" % (topic.encode(), p, i)
            producer.produce(topic, value, partition=p)
            values.add(value)
    assert producer.flush(60) == 0
    return values


def drain(consumers, until, timeout: float = 60) -> dict[str, list]:
    """Poll every consumer in turn until ``until(collected)`` holds; consumer id -> messages."""
    collected = {c.consumer_id: [] for c in consumers}
    deadline = time.monotonic() + timeout
    while not until(collected):
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumers got {sum(len(v) for v in collected.values())} records: not enough")
        for c in consumers:
            collected[c.consumer_id].extend(c.poll(0.1))
    return collected


def values(collected: dict[str, list]) -> list[bytes]:
    return [m.value for ms in collected.values() for m in ms]


def owners(cluster: Cluster, group: str, topic: str) -> dict[int, str]:
    path = znodes.consumer_owners_path(group, topic)
    if not cluster.zk.exists(path):
        return {}
    return {int(p): cluster.zk.get(f"{path}/{p}")[0].decode() for p in cluster.zk.get_children(path)}


def test_one_two_and_three_members_split_partitions_by_range(brokers):
    create(brokers, "five", 5)
    create(brokers, "six", 6)
    written = produce(brokers, "five", 5, 20) | produce(brokers, "six", 6, 20)
    connect, members = brokers.connect, []
    try:
        members.append(ZookeeperConsumer(connect, "g", ["five", "six"], consumer_id="c1",
                                         auto_offset_reset="smallest", **FAST))
        assert members[0].assignment() == {("five", p) for p in range(5)} | {("six", p) for p in range(6)}
        expected = {
            2: {"c1": {("five", p) for p in (0, 1, 2)} | {("six", p) for p in (0, 1, 2)},
                "c2": {("five", p) for p in (3, 4)} | {("six", p) for p in (3, 4, 5)}},
            3: {"c1": {("five", p) for p in (0, 1)} | {("six", p) for p in (0, 1)},
                "c2": {("five", p) for p in (2, 3)} | {("six", p) for p in (2, 3)},
                "c3": {("five", 4)} | {("six", p) for p in (4, 5)}},
        }
        for size in (2, 3):
            members.append(ZookeeperConsumer(connect, "g", ["five", "six"], consumer_id=f"c{size}",
                                             auto_offset_reset="smallest", **FAST))
            wait_for(lambda: {c.consumer_id: c.assignment() for c in members} == expected[size], 30,
                     f"{size} members to split the partitions")
            by_owner = {t: owners(brokers, "g", t) for t in ("five", "six")}
            assert {(t, p): o for t, ps in by_owner.items() for p, o in ps.items()} == {
                tp: c for c, tps in expected[size].items() for tp in tps}
        # together they read everything exactly once, each only from its own share
        collected = drain(members, lambda got: sum(len(v) for v in got.values()) >= len(written))
        assert sorted(values(collected)) == sorted(written)
        for member in members:
            assert {(m.topic, m.partition) for m in collected[member.consumer_id]} <= member.assignment()
        registrations = {i: znodes.ConsumerRegistration.decode(i, brokers.zk.get(f"/consumers/g/ids/{i}")[0])
                         for i in brokers.zk.get_children("/consumers/g/ids")}
        assert registrations.keys() == {"c1", "c2", "c3"}
        assert registrations["c1"].subscription == {"five": 1, "six": 1}
        assert registrations["c1"].pattern == "static"
    finally:
        for member in members:
            member.close()
    assert brokers.zk.get_children("/consumers/g/ids") == []
    assert owners(brokers, "g", "five") == {} and owners(brokers, "g", "six") == {}


MEMBER = textwrap.dedent("""
    import sys, time
    from hpbroker.zkconsumer import ZookeeperConsumer
    consumer = ZookeeperConsumer(sys.argv[1], "g", ["t"], consumer_id="doomed", zookeeper_session_timeout_ms={ms},
                                 rebalance_backoff_ms=500, rebalance_max_retries=10)
    print(sorted(consumer.assignment()), flush=True)
    while True:
        consumer.poll(1.0)
""")


def test_a_member_killed_without_close_loses_its_share_when_its_session_expires(brokers):
    create(brokers, "t", 4)
    with ZookeeperConsumer(brokers.connect, "g", ["t"], consumer_id="a-survivor", **FAST) as survivor:
        doomed = subprocess.Popen([sys.executable, "-c", MEMBER.format(ms=SESSION_MS), brokers.connect], cwd=REPO,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert doomed.stdout is not None  # a pipe
            assert doomed.stdout.readline().strip() == "[('t', 2), ('t', 3)]"
            wait_for(lambda: survivor.assignment() == {("t", 0), ("t", 1)}, 30, "the survivor to give up t-2, t-3")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
            killed_at = time.monotonic()
            wait_for(lambda: survivor.assignment() == {("t", p) for p in range(4)}, 30,
                     "the survivor to take the killed member's share")
            # not before the session could expire (the owner znodes were ephemeral)
            assert time.monotonic() - killed_at > SESSION_MS / 1000 / 2
            assert owners(brokers, "g", "t") == {p: "a-survivor" for p in range(4)}
        finally:
            doomed.kill()
            doomed.wait(10)


def test_a_broker_joining_rebalances_and_a_killed_leader_is_followed(brokers):
    create(brokers, "t", 2)
    first = produce(brokers, "t", 2, 50)
    with ZookeeperConsumer(brokers.connect, "g", ["t"], auto_offset_reset="smallest", **FAST) as consumer:
        collected = drain([consumer], lambda got: len(values(got)) >= len(first))
        before = consumer.rebalances
        brokers.start(3)
        wait_for(lambda: consumer.rebalances > before, 30, "a rebalance after broker 3 registered")
        assert consumer.assignment() == {("t", 0), ("t", 1)}
        # the leader of t-0 dies: the consumer finds the new one in ZooKeeper and reads on
        leader = brokers.leader_of("t", 0)
        brokers.kill(leader)
        wait_for(lambda: brokers.leader_of("t", 0) != leader, 60, "a new leader of t-0")
        second = produce(brokers, "t", 2, 50, start=50)
        more = drain([consumer], lambda got: len(values(got)) >= len(second))
        assert sorted(values(collected)) == sorted(first)
        assert sorted(values(more)) == sorted(second)


def test_a_new_topic_matching_the_pattern_is_taken_up(brokers):
    create(brokers, "events-a", 2)
    with ZookeeperConsumer(brokers.connect, "g", pattern=r"events-.*", auto_offset_reset="smallest",
                           **FAST) as consumer:
        assert consumer.assignment() == {("events-a", 0), ("events-a", 1)}
        registration = znodes.ConsumerRegistration.decode(
            "ids", brokers.zk.get(f"/consumers/g/ids/{consumer.consumer_id}")[0])
        assert registration.pattern == "white_list" and registration.subscription == {"events-.*": 1}
        create(brokers, "other", 1)
        create(brokers, "events-b", 3)
        wait_for(lambda: consumer.assignment() == {("events-a", 0), ("events-a", 1)} | {
            ("events-b", p) for p in range(3)}, 30, "the consumer to take up events-b")
        written = produce(brokers, "events-b", 3, 10)
        assert sorted(values(drain([consumer], lambda got: len(values(got)) >= len(written)))) == sorted(written)


@pytest.mark.parametrize("storage", ["zookeeper", "kafka"])
def test_offsets_resume_after_every_member_restarts(brokers, storage):
    create(brokers, "t", 4)
    first = produce(brokers, "t", 4, 25)
    options: dict[str, Any] = dict(offsets_storage=storage, auto_offset_reset="smallest", auto_commit=False, **FAST)
    members = [ZookeeperConsumer(brokers.connect, "g", ["t"], **options) for _ in range(2)]
    try:
        got = drain(members, lambda got: len(values(got)) >= len(first))
        for member in members:
            member.commit()
    finally:
        for member in members:
            member.close()
    assert sorted(values(got)) == sorted(first)
    if storage == "zookeeper":
        assert {p: int(brokers.zk.get(f"/consumers/g/offsets/t/{p}")[0]) for p in range(4)} == {
            p: 25 for p in range(4)}
    else:
        assert not brokers.zk.exists("/consumers/g/offsets")
    second = produce(brokers, "t", 4, 25, start=25)
    members = [ZookeeperConsumer(brokers.connect, "g", ["t"], **options) for _ in range(2)]
    try:
        got = drain(members, lambda got: len(values(got)) >= len(second))
        assert all(not m.poll(0.3) for m in members)  # nothing read twice
    finally:
        for member in members:
            member.close()
    assert sorted(values(got)) == sorted(second)


def test_dual_commit_moves_a_group_to_kafka_storage_without_losing_its_place(brokers):
    create(brokers, "t", 3)
    for start in range(0, 50, 10):  # batches of 10 records: a 200-byte fetch takes one per partition
        produce(brokers, "t", 3, 10, start=start)
    # the group starts on ZooKeeper storage and reads 10 records of each partition
    with ZookeeperConsumer(brokers.connect, "g", ["t"], auto_offset_reset="smallest", auto_commit=False,
                           fetch_message_max_bytes=200, **FAST) as consumer:
        seen = {p: [] for p in range(3)}
        while any(len(v) < 10 for v in seen.values()):
            for m in consumer.poll(0.5):
                seen[m.partition].append(m.offset)
        consumer.commit()
        zk_positions = {p: int(brokers.zk.get(f"/consumers/g/offsets/t/{p}")[0]) for p in range(3)}
    assert all(pos >= 10 for pos in zk_positions.values())
    # step 1 of the migration: Kafka storage with dual commit; the place comes from ZooKeeper
    with ZookeeperConsumer(brokers.connect, "g", ["t"], offsets_storage="kafka", dual_commit=True,
                           auto_offset_reset="smallest", auto_commit=False, fetch_message_max_bytes=200,
                           **FAST) as consumer:
        resumed = {}
        while len(resumed) < 3:
            for m in consumer.poll(0.5):
                resumed.setdefault(m.partition, m.offset)
        assert resumed == zk_positions
        consumer.commit()
        dual_positions = {p: int(brokers.zk.get(f"/consumers/g/offsets/t/{p}")[0]) for p in range(3)}
    # a confluent-kafka group consumer of the same group starts exactly there
    reader = ck.Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "g", "auto.offset.reset": "earliest",
                          "enable.auto.commit": False})
    try:
        committed = reader.committed([ck.TopicPartition("t", p) for p in range(3)], timeout=30)
        assert {tp.partition: tp.offset for tp in committed} == dual_positions
        reader.subscribe(["t"])
        first = {}
        deadline = time.monotonic() + 60
        while len(first) < 3 and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                first.setdefault(message.partition(), message.offset())
        assert first == dual_positions
    finally:
        reader.close()


def test_bad_znodes_and_a_taken_consumer_id(brokers, caplog):
    create(brokers, "t", 2)
    produce(brokers, "t", 2, 5)
    brokers.zk.ensure_path("/consumers/g/ids")
    brokers.zk.create("/consumers/g/ids/garbled", b"{not json", ephemeral=True)  # another member, unreadable
    brokers.zk.create("/consumers/g/offsets/t/0", b"not-a-number", makepath=True)
    brokers.zk.create("/consumers/g/offsets/t/1", b"3", makepath=True)
    with ZookeeperConsumer(brokers.connect, "g", ["t"], consumer_id="me", auto_offset_reset="smallest",
                           **FAST) as consumer:
        assert consumer.assignment() == {("t", 0), ("t", 1)}  # the unreadable member is given nothing
        got = drain([consumer], lambda got: len(values(got)) >= 7)
        starts = {}
        for m in got["me"]:
            starts.setdefault(m.partition, m.offset)
        assert starts == {0: 0, 1: 3}  # the garbled offset counts as none: auto_offset_reset decides
        with pytest.raises(ConsumerIdInUse):
            ZookeeperConsumer(brokers.connect, "g", ["t"], consumer_id="me", **FAST)
    assert "garbled" in caplog.text and "not-a-number" in caplog.text
    with pytest.raises(ValueError, match="offsets_storage"):
        ZookeeperConsumer(brokers.connect, "g", ["t"], offsets_storage="redis")


def test_the_console_consumer_joins_a_zookeeper_group(brokers):
    create(brokers, "t", 3)
    written = produce(brokers, "t", 3, 10)
    group = ["--zookeeper", brokers.connect, "--group", "console"]
    first = [json.loads(line) for line in ok("consume", "t", *group, "--from-beginning", "--max-messages", "4",
                                              "--json").splitlines()]
    assert len(first) == 4
    stored = {p: int(brokers.zk.get(f"/consumers/console/offsets/t/{p}")[0]) for p in range(3)}
    assert sum(stored.values()) == 4  # what was fetched but not printed is not counted as read
    rest = ok("consume", "t", *group, "--exit-at-end", "--format", "%p %o %s\\n").splitlines()
    assert sorted([r["value"].encode() for r in first] + [line.split()[2].encode() for line in rest]) == \
        sorted(written)
    assert {p: int(brokers.zk.get(f"/consumers/console/offsets/t/{p}")[0]) for p in range(3)} == \
        {p: 10 for p in range(3)}
    assert failed("consume", "nope", *group) == "hpbroker consume: topic 'nope' does not exist"
    assert failed("consume", "t", *group, "--partition", "1").startswith(
        "hpbroker consume: --partition and --offset do not go with --zookeeper")
    assert failed("consume", "t", "--zookeeper", brokers.connect) == (
        "hpbroker consume: --zookeeper needs --group: a ZooKeeper-coordinated consumer is always a group member")
