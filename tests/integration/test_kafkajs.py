"""kafkajs (Node.js), the client of many JavaScript services, against a real
broker: its transactional producer commits, aborts and commits a group's
offsets in a transaction; a second instance fences the first; a producer
that dies in a transaction is aborted at its timeout; and its consumer reads
committed records only.  kafkajs is installed with npm into ``.venv/node`` on
first use."""

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration import node as nodejs
from tests.integration.clients import ck_read_committed, topic_name

KAFKAJS = "kafkajs@2.2.4"


@pytest.fixture(scope="session")
def node_modules():
    return nodejs.installed(KAFKAJS)


def test_kafkajs_transactions(broker, node_modules):
    topic, group = topic_name("kafkajs"), topic_name("kafkajs-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    run = nodejs.run(node_modules, "kafkajs_transactions.js", broker.bootstrap, topic, f"kafkajs-{topic}", group)
    committed = sorted([f"committed-{i}" for i in range(10)] + [f"with-offsets-{i}" for i in range(4)])
    assert sorted(run["read"]) == committed  # kafkajs reads committed only
    assert sorted(v.decode() for v in ck_read_committed(broker.bootstrap, topic, range(2), 14)) == committed
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [offset] = consumer.committed([ck.TopicPartition(topic, 0)], 30)
    finally:
        consumer.close()
    assert offset.offset == 7  # the offsets committed in the transaction took effect with it


def test_kafkajs_fencing_and_a_producer_dying_in_its_transaction(broker_factory, node_modules):
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = topic_name("kafkajs-fencing")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    run = nodejs.run(node_modules, "kafkajs_fencing.js", broker.bootstrap, topic, f"kafkajs-{topic}")
    assert run["fenced"] in ("INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED")  # the first instance's commit failed
    # the fenced and the dead producers' records are never read; the reader got past both
    assert sorted(run["read"]) == ["after-0", "second-0"]
    assert sorted(v.decode() for v in ck_read_committed(broker.bootstrap, topic, range(1), 2)) == [
        "after-0", "second-0"]
