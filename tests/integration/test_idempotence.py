"""Idempotent producers as the clients use them by default (kafka-python 3
turns idempotence on; librdkafka with enable.idempotence): InitProducerId,
sequence numbers, and records exactly once."""

import pytest

from tests.integration.clients import CONSUME, PRODUCE, topic_name

CONF = {"confluent": {"enable.idempotence": True}, "kafka-python": {}}  # kafka-python: on by default


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_idempotent_producer(broker, client):
    topic = topic_name("idem")
    n = 500
    acks = PRODUCE[client](broker.bootstrap, topic, [{"value": b"i%d" % i, "partition": 0} for i in range(n)],
                           **CONF[client])
    assert [o for _, o in acks] == list(range(n))
    other = "kafka-python" if client == "confluent" else "confluent"
    got = CONSUME[other](broker.bootstrap, topic, [0], n)
    assert [r.value for r in got] == [b"i%d" % i for i in range(n)]
