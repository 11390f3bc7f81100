"""Three brokers, replication factor 3, min.insync.replicas=2, with an
idempotent acks=all producer and a consumer group running throughout, while
brokers die one at a time: the leader, then the controller, then the new
leader, each back in the ISR before the next dies.  Nothing acknowledged is lost, nothing is
written twice, and the group keeps consuming from its committed offsets."""

import threading
import time
from typing import cast

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for

PARTITIONS = 3


class Producing:
    """An idempotent acks=all producer sending numbered values until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 5, "message.timeout.ms": 120000,
                                     "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500})
        self.topic = topic
        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.add(message.value())
        else:
            self.failed.append(f"{message.value()!r}: {error}")

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, b"v-%06d" % n, key=b"k-%d" % (n % 17), on_delivery=self._delivered)
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(120)

    def progressed(self, count: int):
        """A condition: ``count`` more acknowledgements than when asked."""
        target = len(self.acked) + count
        return lambda: len(self.acked) >= target

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(150)


class Consuming:
    """One consumer of a group, committing as it goes."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "auto.offset.reset": "earliest", "auto.commit.interval.ms": 500,
                                     "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
                                     "session.timeout.ms": 10000})
        self.consumer.subscribe([topic])
        self.seen: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.seen.add(cast(bytes, message.value()))  # confluent-kafka types it Optional (null values)
        self.consumer.close()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(30)


def read_everything(bootstrap: str, topic: str) -> list[bytes]:
    """Every record of the topic, from a fresh consumer (no group)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    values = []
    try:
        ends = {}
        for p in range(PARTITIONS):
            _low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)
            ends[p] = high
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        positions = {p: 0 for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
                # a record's: confluent-kafka types them Optional for error messages
                positions[cast(int, message.partition())] = cast(int, message.offset()) + 1
    finally:
        consumer.close()
    return values


def test_nothing_acknowledged_is_lost_through_three_broker_deaths(cluster):
    topic = "orders"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    cluster.wait_in_sync(topic, PARTITIONS)
    producing = Producing(cluster.bootstrap, topic)
    consuming = Consuming(cluster.bootstrap, topic, "survivors")
    try:
        wait_for(producing.progressed(300), 60, "the producer to get going")
        wait_for(lambda: len(consuming.seen) >= 100, 60, "the group to get going")

        # one broker down at a time: with min.insync.replicas=2 two down would stop acks=all writes
        first = cluster.leader_of(topic, 0)
        cluster.kill(first)
        wait_for(producing.progressed(300), 90, f"acks=all writes to carry on without broker {first}")
        cluster.start(first)
        cluster.wait_in_sync(topic, PARTITIONS)
        controller = cluster.controller()
        cluster.kill(controller)
        wait_for(producing.progressed(300), 90, f"writes to carry on without the controller {controller}")
        cluster.start(controller)
        cluster.wait_in_sync(topic, PARTITIONS)
        leader = cluster.leader_of(topic, 0)
        cluster.kill(leader)
        wait_for(producing.progressed(300), 90, f"writes to carry on without the new leader {leader}")
        cluster.start(leader)
        cluster.wait_in_sync(topic, PARTITIONS)
        producing.stop()
        assert not producing.failed, producing.failed[:5]
        wait_for(lambda: producing.acked <= consuming.seen, 90, "the group to read every acknowledged record")
    finally:
        producing.stop()
        consuming.stop()
    written = read_everything(cluster.bootstrap, topic)
    assert len(written) == len(set(written)), "a record was written twice"
    assert producing.acked <= set(written)
    # the group's committed offsets (replicated like any record) are where it stopped: the end
    probe = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "survivors"})
    try:
        committed = probe.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        ends = [probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)]
    finally:
        probe.close()
    assert [tp.offset for tp in committed] == ends
