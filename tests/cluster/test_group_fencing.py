"""A consumer group whose coordinator is fenced just as the consumer asks for its
committed offsets: the coordinator's worker is paused for longer than half the
ZooKeeper session timeout (a stall on a busy machine), so it fences its
leaderships until the session is confirmed, and the OffsetFetch the consumer
sends for its new assignment meets that fence.  The consumer must still read:
librdkafka never retries an OffsetFetch answered NOT_COORDINATOR, and never
fetches the partitions it asked about."""

import os
import signal
import time

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from hpbroker.server.ownership import group_partition
from tests.cluster.brokers import SESSION_MS, cluster  # noqa: F401
from tests.integration.broker import children, wait_for

TOPIC, GROUP, PARTITIONS, RECORDS = "orders", "survivors", 3, 30


def test_a_consumer_whose_offset_fetch_meets_a_fenced_coordinator_still_reads(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    cluster.wait_in_sync(TOPIC, PARTITIONS)
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for n in range(RECORDS):
        producer.produce(TOPIC, b"v-%d" % n, partition=n % PARTITIONS)
    assert producer.flush(30) == 0

    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                            "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    paused = []

    def on_assign(c, partitions):
        # before assign(): its OffsetFetch then waits in the paused worker's socket
        coordinator = cluster.leader_of("__consumer_offsets", group_partition(GROUP, PARTITIONS))
        (worker,) = children(cluster.brokers[coordinator].pid)
        os.kill(worker, signal.SIGSTOP)
        try:
            time.sleep(SESSION_MS / 1000 / 2 + 0.5)
            c.assign(partitions)
            time.sleep(0.3)
        finally:
            os.kill(worker, signal.SIGCONT)
        paused.append(coordinator)

    consumer.subscribe([TOPIC], on_assign=on_assign)
    seen = set()
    try:
        def read() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.add(message.value())
            return len(seen) == RECORDS
        wait_for(read, 60, f"the group to read all {RECORDS} records", interval=0)
    finally:
        consumer.close()
    assert paused
    log = cluster.brokers[paused[0]].log_path.read_text()
    assert "leaderships in doubt until the session is confirmed" in log  # the pause was noticed
