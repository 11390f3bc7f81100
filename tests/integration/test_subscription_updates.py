"""A consumer subscribed to topics that do not exist yet (auto-create off, two
workers): it is assigned them once they are created, and the assignment
shrinks when one is deleted.

The topics of one CreateTopics request must appear together, each with all its
partitions, on every worker (Kafka commits them in one metadata batch).  If a
Metadata answer from the worker that is not creating them shows the first
topic without the second, librdkafka joins with that one alone and looks again
only after ``topic.metadata.refresh.interval.ms`` (five minutes by default), so
the consumer goes without the other topic for that long.  A large topic
created between the two makes that window seconds wide."""

import threading

import confluent_kafka as ck
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for
from tests.integration.clients import topic_name
from tests.integration.conftest import module_broker

F_PARTITIONS, G_PARTITIONS, FILLER_PARTITIONS = 5, 9, 400
broker = module_broker({"auto.create.topics.enable": "false", "num.workers": "2",
                        "group.initial.rebalance.delay.ms": "200"})


def partitions_of(topics: dict) -> set:
    return {(t, p) for t, n in topics.items() for p in range(n)}


def run(futures: dict, timeout: float = 30) -> None:
    for f in futures.values():
        f.result(timeout)


class MetadataWatcher:
    """Asks for all topics over several connections (spread over both workers by
    the acceptor) until stopped; every answer's view of ``topics`` is kept."""

    def __init__(self, bootstrap: str, topics: dict, clients: int = 4):
        self.topics = topics
        self.handles = [ck.Producer({"bootstrap.servers": bootstrap}) for _ in range(clients)]
        self.views: list[dict] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch, args=(h,), daemon=True) for h in self.handles]

    def _watch(self, handle) -> None:
        while not self._stop.is_set():
            md = handle.list_topics(timeout=10)
            self.views.append({t: len(md.topics[t].partitions) for t in self.topics
                               if t in md.topics and md.topics[t].error is None})

    def __enter__(self):
        for h in self.handles:
            h.list_topics(timeout=10)  # connected before the creation starts
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_consumer_is_assigned_topics_created_after_subscribing(broker, strategy):
    f, g, filler = topic_name("sub-f"), topic_name("sub-g"), topic_name("sub-filler")
    events = []

    def record(kind):  # the client (incrementally) assigns and revokes by itself after the callback
        return lambda consumer, partitions: events.append((kind, {(p.topic, p.partition) for p in partitions}))

    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name("sub-group"),
                            "partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 500, "topic.metadata.refresh.interval.ms": 1000,
                            "enable.auto.commit": False})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        consumer.subscribe([f, g], on_assign=record("assign"), on_revoke=record("revoke"))

        def told_missing():
            m = consumer.poll(0.1)
            error = m.error() if m is not None else None
            return error is not None and error.code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
        wait_for(told_missing, 15, "the consumer to be told its topics do not exist")
        assert not consumer.assignment() and not events

        wanted = {f: F_PARTITIONS, filler: FILLER_PARTITIONS, g: G_PARTITIONS}
        with MetadataWatcher(broker.bootstrap, wanted) as watcher:
            run(admin.create_topics([NewTopic(name, n, 1) for name, n in wanted.items()]))
            wait_for(lambda: watcher.views and watcher.views[-1] == wanted, 15, "the watchers to see the new topics")
        half_made = [v for v in watcher.views if v and v != wanted]
        assert not half_made, f"Metadata showed part of one CreateTopics request: {half_made[:3]}"

        def assigned():
            consumer.poll(0.1)
            return {(p.topic, p.partition) for p in consumer.assignment()}

        both = partitions_of({f: F_PARTITIONS, g: G_PARTITIONS})
        wait_for(lambda: assigned() == both, 30, "an assignment of both topics")
        assert events[0] == ("assign", both), f"first assignment was not both topics whole: {events[:2]}"

        run(admin.delete_topics([f]))
        only_g = partitions_of({g: G_PARTITIONS})
        wait_for(lambda: assigned() == only_g, 30, "the assignment to shrink to the remaining topic")
        assert any(kind == "revoke" and {t for t, _ in ps} >= {f} for kind, ps in events), events
    finally:
        consumer.close()


def test_kafka_python_consumer_follows_creation_and_deletion(broker):
    f, g, group = topic_name("kp-sub-f"), topic_name("kp-sub-g"), topic_name("kp-sub-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                                   session_timeout_ms=6000, heartbeat_interval_ms=500, metadata_max_age_ms=1000)

    def assigned():
        # Long enough for a whole rejoin: kafka-python 3.0.12 drops a rejoin that a short poll
        # left in flight once its leader has computed the assignment, and stops heartbeating.
        consumer.poll(1000)
        return {(tp.topic, tp.partition) for tp in consumer.assignment()}

    def joined_with_nothing():  # kafka-python joins even while none of its topics exist
        assigned()
        described = admin.describe_consumer_groups([group])[group].result(10)
        return described.state == ck.ConsumerGroupState.STABLE and len(described.members) == 1

    try:
        consumer.subscribe([f, g])
        wait_for(joined_with_nothing, 20, "kafka-python to join the group before its topics exist")
        assert not consumer.assignment()
        run(admin.create_topics([NewTopic(f, F_PARTITIONS, 1), NewTopic(g, G_PARTITIONS, 1)]))
        wait_for(lambda: assigned() == partitions_of({f: F_PARTITIONS, g: G_PARTITIONS}), 30,
                 "kafka-python to be assigned both topics")
        run(admin.delete_topics([f]))
        wait_for(lambda: assigned() == partitions_of({g: G_PARTITIONS}), 30,
                 "kafka-python's assignment to shrink to the remaining topic")
    finally:
        consumer.close()
