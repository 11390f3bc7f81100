"""@platformatic/kafka (Node.js), a current pure-JavaScript client, against a
real broker: idempotent producers, each new one naming producer id 0 and
epoch 0 when it asks for its id (as this client does), get ids of their own
and lose nothing; its consumer group reads everything with the headers and
commits.  Installed with npm into ``.venv/node`` on first use."""

from collections import Counter

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration import node as nodejs
from tests.integration.clients import ck_consume_all, ck_watermarks, topic_name

PLATFORMATIC = "@platformatic/kafka@1.35.0"
PER_PRODUCER = 300
CODECS = ("gzip", "snappy", "lz4")  # zstd needs Node.js 22.15's zlib


@pytest.fixture(scope="session")
def node_modules():
    return nodejs.installed(PLATFORMATIC, min_node=(20, 19, 4))


def test_idempotent_producers_of_one_client_each_get_an_id_and_a_group_reads_all(broker, node_modules):
    topic, group = topic_name("platformatic"), topic_name("platformatic-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    run = nodejs.run(node_modules, "platformatic_idempotent.mjs", broker.bootstrap, topic, group, str(PER_PRODUCER))
    assert len(set(run["ids"])) == 3, run["ids"]  # the broker gave each producer an id of its own
    written = {f"{codec}-{i}" for codec in CODECS for i in range(PER_PRODUCER)}
    assert Counter(run["read"]) == Counter(written) and run["headers"]
    # every record stored once: a second producer's batches were not taken for the first's retries
    stored = [bytes(r.value or b"").decode() for r in ck_consume_all(broker.bootstrap, topic, range(3))]
    assert Counter(stored) == Counter(written)
    # the group's commits stand at the log end of every partition
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([ck.TopicPartition(topic, p) for p in range(3)], 30)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [ck_watermarks(broker.bootstrap, topic, p)[1] for p in range(3)]
