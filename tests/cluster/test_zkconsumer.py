"""The ZooKeeper-coordinated consumer against a real ZooKeeper and real
cluster-mode brokers: the range split among one, two and three members,
a member SIGKILLed (its share moves once its session expires), a broker
added, a leader killed, a topic matching a pattern, offsets resumed after
every member restarts, and a group moved to Kafka storage by dual commit and
read on by a confluent-kafka group consumer from the same place."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from hpbroker.cluster import znodes
from hpbroker.cluster.consumer_registry import ConsumerIdInUse
from hpbroker.zkconsumer import ZookeeperConsumer
from tests.cluster.brokers import Cluster
from tests.integration.broker import REPO, wait_for

SESSION_MS = 4000  # the consumers' ZooKeeper session: how long a killed member holds its share
FAST = {"zookeeper_session_timeout_ms": SESSION_MS, "rebalance_backoff_ms": 500, "rebalance_max_retries": 10}


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
