"""A topic deleted and created again under the same name: every worker serves
the new topic id (a Fetch v13+ names topics by id), and what the old one held
is gone."""

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for
from hpbroker.storage.checkpoints import kafka_uuid_string, read_partition_metadata
from tests.integration.clients import ck_consume, ck_produce, topic_name


def _ids_seen(broker, topic, clients=6) -> set:
    """The topic id in Metadata from several new connections (the acceptor
    spreads them over the workers)."""
    seen = set()
    for _ in range(clients):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        description = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
        # librdkafka prints ids in standard base64, Kafka (and we) in URL-safe base64
        seen.add(str(description.topic_id).replace("/", "_").replace("+", "-"))
    return seen


def test_recreated_topic_has_one_new_id_everywhere(broker):
    topic = topic_name("lifecycle")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    ck_produce(broker.bootstrap, topic, [{"value": b"old", "partition": p} for p in (0, 1)])
    first = _ids_seen(broker, topic)
    admin.delete_topics([topic])[topic].result(30)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    on_disk = read_partition_metadata(str(broker.data_dir / f"{topic}-0" / "partition.metadata"))
    wait_for(lambda: _ids_seen(broker, topic) == {kafka_uuid_string(on_disk)}, timeout=30,
             what="every worker to serve the new topic id")
    assert first != {kafka_uuid_string(on_disk)}
    ck_produce(broker.bootstrap, topic, [{"value": b"new", "partition": p} for p in (0, 1)])
    assert [r.value for r in ck_consume(broker.bootstrap, topic, [0, 1], 2)] == [b"new", b"new"]

