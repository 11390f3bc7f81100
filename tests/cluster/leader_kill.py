"""acks=all writes through the SIGKILL of a partition leader, for the tests of
each listener kind (SASL, TLS): an idempotent librdkafka producer writes 600
records over a topic's partitions, partition 0's leader is killed, 600 more
are written once another leads, and a consumer group must read every one,
none twice."""

import confluent_kafka as ck

from harness.cluster import Cluster
from harness.waiting import wait_for


def write_through_a_leader_kill(cluster: Cluster, topic: str, partitions: int, conf: dict) -> int:
    """The killed broker's id (the test starts it again); ``conf`` is the
    clients' settings for the listener, bootstrap included."""
    acked: set[bytes] = set()

    def produce(start: int, count: int) -> None:
        producer = ck.Producer({**conf, "acks": "all", "enable.idempotence": True})

        def delivered(err, msg):
            if err is None:
                acked.add(msg.value())
        for n in range(start, start + count):
            producer.produce(topic, b"%d" % n, partition=n % partitions, on_delivery=delivered)
        assert producer.flush(60) == 0

    produce(0, 600)
    victim = cluster.leader_of(topic, 0)
    cluster.kill(victim)
    wait_for(lambda: cluster.leader_of(topic, 0) != victim, 60, "a new leader of partition 0")
    produce(600, 600)
    assert len(acked) == 1200

    consumer = ck.Consumer({**conf, "group.id": "auditors", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        def read_all() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
            return acked <= set(seen)
        wait_for(read_all, 60, "every acknowledged record to be read")
    finally:
        consumer.close()
    assert len(seen) == len(set(seen)), "a record stored twice"
    return victim
