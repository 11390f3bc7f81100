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

from harness.broker import children
from harness.cluster import FAST, SESSION_MS
from harness.waiting import wait_for
from hpbroker.server.ownership import group_partition

TOPIC, GROUP, PARTITIONS, RECORDS = "orders", "survivors", 3, 30
STALL_S = SESSION_MS / 1000 / 2 + 0.5  # past half the session timeout: the worker must doubt its session


def unread_from_here(port: int) -> int:
    """Bytes this process has sent over its TCP connections to ``port`` that the
    other end has not read yet: the receive queues (``rx_queue`` in
    /proc/net/tcp) of the sockets at ``port`` whose peers are this process's."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
                rows.append((local, remote, int(fields[4].split(":")[1], 16), fields[9]))
    my_ports = {local for local, remote, _, inode in rows if remote == port and inode in mine}
    return sum(unread for local, remote, unread, _ in rows if local == port and remote in my_ports)


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
        offsets_partitions = int(FAST["offsets.topic.num.partitions"])
        coordinator = cluster.leader_of("__consumer_offsets", group_partition(GROUP, offsets_partitions))
        port = cluster.brokers[coordinator].port
        (worker,) = children(cluster.brokers[coordinator].pid)
        os.kill(worker, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_for(lambda: time.monotonic() - stopped >= STALL_S, STALL_S + 5, "the stall")  # the fault itself
            queued = unread_from_here(port)
            c.assign(partitions)
            wait_for(lambda: unread_from_here(port) > queued, 10, "the OffsetFetch to wait in the worker's socket")
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
