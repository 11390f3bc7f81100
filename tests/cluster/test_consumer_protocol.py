"""A consumer group of the consumer protocol (KIP-848) in a cluster whose
group coordinator dies: the members find the new coordinator (the new
leader of the group's ``__consumer_offsets`` partition), are told they are
unknown there, join again and read on from their commits, with records
produced (acks=all) before and after the death all read."""

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import FAST, Cluster
from hpbroker.server.ownership import group_partition
from tests.integration.test_groups import Members

TOPIC, GROUP, PARTITIONS = "payments", "kip848-survivors", 6


@pytest.fixture
def cluster(zookeeper, chroot, tmp_path):
    found = Cluster(chroot, tmp_path, 3, overrides={"min.insync.replicas": "2",
                                                    "group.consumer.session.timeout.ms": "6000",
                                                    "group.consumer.heartbeat.interval.ms": "500"})
    found.start_all()
    yield found
    found.close()


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for n in range(start, start + count):
        producer.produce(TOPIC, b"%d" % n, partition=n % PARTITIONS)
    assert producer.flush(60) == 0


def member(bootstrap: str) -> ck.Consumer:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([TOPIC])
    return c


def commit(members: Members) -> None:
    for c in members.consumers:
        try:
            c.commit(asynchronous=False)
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError._NO_OFFSET:  # a member that has read nothing yet
                raise


def test_members_rejoin_at_the_new_coordinator_and_read_on(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    cluster.wait_in_sync(TOPIC, PARTITIONS)
    produce(cluster.bootstrap, 0, 300)
    members = Members([member(cluster.bootstrap) for _ in range(2)])
    try:
        members.until(lambda: len(set(members.all_values())) >= 300, 60, "the first records")
        commit(members)
        coordinator = cluster.leader_of("__consumer_offsets",
                                        group_partition(GROUP, int(FAST["offsets.topic.num.partitions"])))
        cluster.kill(coordinator)
        produce(cluster.bootstrap, 300, 300)
        members.until(lambda: set(members.all_values()) >= set(range(600)), 90,
                      "every record, before and after the coordinator died")
        members.until(members.balanced, 30, "the two members to share the topic again")

        def committed_everything() -> bool:  # a partition's new owner commits once it has read on
            commit(members)
            offsets = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(GROUP)])[GROUP].result(30)
            return sum(tp.offset for tp in offsets.topic_partitions) == 600
        members.until(committed_everything, 30, "the group to commit every record")
        described = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
        assert described.type == ck.ConsumerGroupType.CONSUMER and len(described.members) == 2
        assert described.coordinator.id != coordinator
    finally:
        members.close()
