"""Consumer groups against the real broker: confluent-kafka (librdkafka 2.16)
and kafka-python members sharing a six-partition topic, hand-over when a
member closes or dies, a static member's restart, committed offsets across a
broker restart, and the admin APIs (describe / list / delete groups, list /
alter offsets).  librdkafka's members take part with the classic protocol
and with the consumer protocol (KIP-848, ``group.protocol=consumer``) alike;
what only the latter has is in test_consumer_protocol.py."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import confluent_kafka as ck
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for
from tests.integration.clients import ck_produce, topic_name
from tests.integration.conftest import module_broker

PARTITIONS = 6
SESSION_MS = 6000
# the consumer protocol's session and heartbeat are the coordinator's: the same as the classic members'
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "200", "group.consumer.session.timeout.ms": str(SESSION_MS),
                  "group.consumer.heartbeat.interval.ms": "500"}
broker = module_broker(GROUP_SETTINGS)
PROTOCOLS = ["classic", "consumer"]  # KIP-848's, with group.protocol=consumer


def make_topic(bootstrap: str, prefix: str) -> str:
    topic = topic_name(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    for f in futures.values():
        f.result(10)
    return topic


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    ck_produce(bootstrap, topic,
               [{"value": b"%d" % i, "partition": i % PARTITIONS} for i in range(start, start + count)])


def member_config(protocol: str) -> dict:
    """librdkafka's group settings for a member: in the classic protocol its own
    session and heartbeat, in the consumer protocol the coordinator's."""
    if protocol == "consumer":
        return {"group.protocol": "consumer"}
    return {"group.protocol": "classic", "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500}


def ck_member(bootstrap: str, group: str, topic: str, **conf) -> ck.Consumer:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "topic.metadata.refresh.interval.ms": 2000,
                     **member_config(conf.pop("group.protocol", "classic")), **conf})
    c.subscribe([topic])
    return c


class Members:
    """Several consumers polled in turn from this thread; records by value."""

    def __init__(self, consumers):
        self.consumers = list(consumers)
        self.seen = {c: [] for c in self.consumers}

    def poll_round(self, timeout: float = 0.05) -> None:
        for c in self.consumers:
            for m in c.consume(100, timeout):
                if m.error() is None:
                    self.seen[c].append(int(m.value()))
                elif m.error().code() != ck.KafkaError._PARTITION_EOF:
                    raise AssertionError(m.error())

    def until(self, condition, timeout: float, what: str):
        """Poll the members in turn until ``condition`` holds (each round is the pause)."""
        wait_for(lambda: condition() or self.poll_round(), timeout, what, interval=0)

    def assigned(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def balanced(self) -> bool:
        sets = self.assigned()
        union = set().union(*sets)
        return (union == set(range(PARTITIONS)) and sum(map(len, sets)) == PARTITIONS
                and max(map(len, sets)) - min(map(len, sets)) <= 1)

    def all_values(self) -> list[int]:
        return sorted(v for values in self.seen.values() for v in values)

    def close(self) -> None:
        for c in self.consumers:
            c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", [2, 3])
def test_members_share_a_topic_each_record_read_once(broker, n, protocol):
    topic = make_topic(broker.bootstrap, "grp")
    group = topic + "-g"
    members = Members(ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol}) for _ in range(n))
    try:
        members.until(members.balanced, 30, f"{n} members to share {PARTITIONS} partitions")
        assert sorted(map(len, members.assigned())) == [PARTITIONS // n] * n
        produce(broker.bootstrap, topic, 0, 120)
        members.until(lambda: len(members.all_values()) >= 120, 30, "all records")
        members.poll_round(0.3)
        assert members.all_values() == list(range(120))  # each exactly once
        assert all(members.seen.values()), "every member read some"
    finally:
        members.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_closing_member_hands_its_partitions_over(broker, protocol):
    topic = make_topic(broker.bootstrap, "grp-close")
    group = topic + "-g"
    stays, leaves = (ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol}),
                     ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol}))
    members = Members([stays, leaves])
    members.until(members.balanced, 30, "two members to share the topic")
    produce(broker.bootstrap, topic, 0, 60)
    members.until(lambda: len(members.all_values()) >= 60, 30, "the first records")
    leaves.commit(asynchronous=False)
    stays.commit(asynchronous=False)
    leaves.close()  # LeaveGroup (a heartbeat with epoch -1): no session timeout to wait for
    members = Members([stays])
    started = time.monotonic()
    members.until(lambda: members.assigned() == [set(range(PARTITIONS))], 10, "the partitions to move")
    assert time.monotonic() - started < SESSION_MS / 1000
    produce(broker.bootstrap, topic, 60, 60)
    members.until(lambda: len(members.all_values()) >= 60, 30, "the later records")
    members.poll_round(0.3)
    assert members.all_values() == list(range(60, 120))  # resumed from the commits: nothing twice
    stays.close()


_CHILD = textwrap.dedent("""
    import json, sys, confluent_kafka as ck
    bootstrap, group, topic, timing = sys.argv[1:5]
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     **json.loads(timing)})
    c.subscribe([topic], on_assign=lambda c, parts: print("assigned", len(parts), flush=True))
    while True:
        c.poll(0.1)
""")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_killed_member_hands_over_within_the_session_timeout(broker, protocol):
    topic = make_topic(broker.bootstrap, "grp-kill")
    group = topic + "-g"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, broker.bootstrap, group, topic,
                              json.dumps(member_config(protocol))], stdout=subprocess.PIPE, text=True)
    survivor = ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol})
    members = Members([survivor])
    try:
        members.until(lambda: len(members.assigned()[0]) == PARTITIONS // 2, 30, "the child to take half")
        os.kill(child.pid, signal.SIGKILL)  # no LeaveGroup: only the session timeout tells
        child.wait(10)
        killed = time.monotonic()
        members.until(lambda: members.assigned() == [set(range(PARTITIONS))], 20, "the dead member's partitions")
        took = time.monotonic() - killed
        assert took < SESSION_MS / 1000 + 4, took  # expiry, then one rejoin (or one heartbeat)
        produce(broker.bootstrap, topic, 0, 30)
        members.until(lambda: len(members.all_values()) >= 30, 20, "records from every partition")
        assert members.all_values() == list(range(30))
    finally:
        if child.poll() is None:
            child.kill()
        survivor.close()


def test_kafka_python_group_consumer_and_admin(broker):
    topic = make_topic(broker.bootstrap, "grp-kp")
    group = topic + "-g"
    produce(broker.bootstrap, topic, 0, 60)
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 60 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(int(r.value) for r in records)
    assert sorted(got) == list(range(60))
    assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
    consumer.commit()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.state == ck.ConsumerGroupState.STABLE and len(described.members) == 1
    assert described.partition_assignor == "range"
    assert len(described.members[0].assignment.topic_partitions) == PARTITIONS
    deleting = admin.delete_consumer_groups([group])[group]
    with pytest.raises(ck.KafkaException) as failed:
        deleting.result(10)
    assert failed.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
    consumer.close()
    offsets = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert {(tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions} == {
        (topic, p, 10) for p in range(PARTITIONS)}


def test_admin_commits_lists_and_deletes_groups(broker):
    topic = make_topic(broker.bootstrap, "grp-admin")
    group = topic + "-g"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    wanted = [ck.TopicPartition(topic, p, 5 + p, metadata="m%d" % p) for p in range(PARTITIONS)]
    admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, wanted)])[group].result(10)
    req = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, p) for p in (0, 5)])
    listed = admin.list_consumer_group_offsets([req])[group].result(10)
    assert [(tp.partition, tp.offset, tp.metadata) for tp in listed.topic_partitions] == [(0, 5, "m0"), (5, 10, "m5")]
    groups = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in groups.valid}
    assert admin.describe_consumer_groups([group])[group].result(10).state == ck.ConsumerGroupState.EMPTY
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    missing = admin.delete_consumer_groups([group])[group]
    with pytest.raises(ck.KafkaException) as failed:
        missing.result(10)
    assert failed.value.args[0].code() == ck.KafkaError.GROUP_ID_NOT_FOUND
    c = ck_member(broker.bootstrap, group, topic, **{"enable.auto.commit": False})
    try:  # the offsets went with the group: a new member starts from the beginning
        assert c.committed([ck.TopicPartition(topic, 0)], timeout=10)[0].offset == ck.OFFSET_INVALID
    finally:
        c.close()


def test_a_new_member_resumes_from_committed_offsets_after_a_restart(broker_factory):
    b = broker_factory(GROUP_SETTINGS)
    topic = make_topic(b.bootstrap, "grp-restart")
    group = topic + "-g"
    produce(b.bootstrap, topic, 0, 60)
    first = Members([ck_member(b.bootstrap, group, topic, **{"enable.auto.commit": False})])
    first.until(lambda: len(first.all_values()) >= 60, 30, "the first records")
    first.consumers[0].commit(asynchronous=False)
    first.close()
    produce(b.bootstrap, topic, 60, 30)
    b.restart()
    second = Members([ck_member(b.bootstrap, group, topic)])
    try:
        second.until(lambda: len(second.all_values()) >= 30, 40, "the records after the commit")
        second.poll_round(0.3)
        assert second.all_values() == list(range(60, 90))
    finally:
        second.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_static_member_restarting_within_its_session_keeps_its_partitions(broker, protocol):
    topic = make_topic(broker.bootstrap, "grp-static")
    group = topic + "-g"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    revoked = []
    a = ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol, "group.instance.id": "a"})
    a.subscribe([topic], on_revoke=lambda c, parts: revoked.append(len(parts)))
    b = ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol, "group.instance.id": "b"})
    members = Members([a, b])
    members.until(members.balanced, 30, "two static members to share the topic")
    members.poll_round(0.5)
    revoked.clear()  # a gave up all six (classic, eager) or three (consumer protocol) when b arrived
    before = members.assigned()[1]
    b.close()  # a static member's leave keeps its place for the session timeout
    restarted = ck_member(broker.bootstrap, group, topic, **{"group.protocol": protocol, "group.instance.id": "b"})
    members = Members([a, restarted])
    members.until(lambda: members.assigned()[1] == before, 10, "the restarted member to get its partitions back")
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.state == ck.ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in described.members) == ["a", "b"]
    members.poll_round(0.5)
    assert revoked == [] and len(members.assigned()[0]) == PARTITIONS // 2  # no rebalance happened
    members.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer_commits_and_resumes(broker):
    topic = make_topic(broker.bootstrap, "grp-kcat")
    produce(broker.bootstrap, topic, 0, 60)
    cmd = ["kcat", "-b", broker.bootstrap, "-G", topic + "-g", "-X", "auto.offset.reset=earliest",
           "-X", f"session.timeout.ms={SESSION_MS}", "-e", topic]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert sorted(int(v) for v in first.stdout.split()) == list(range(60)), first.stderr
    produce(broker.bootstrap, topic, 60, 6)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert sorted(int(v) for v in second.stdout.split()) == list(range(60, 66)), second.stderr
