"""@platformatic/kafka (Node.js), a current pure-JavaScript client, against a
real broker: idempotent producers, each new one naming producer id 0 and
epoch 0 when it asks for its id (as this client does), get ids of their own
and lose nothing; its transactions commit and abort; its consumer group reads
everything committed with the headers and commits.  Installed with npm into
``.venv/node`` on first use."""

from collections import Counter
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration import node as nodejs
from tests.integration.clients import ck_consume, ck_read_committed, ck_watermarks, topic_name

PLATFORMATIC = "@platformatic/kafka@1.35.0"
PER_PRODUCER = 300
CODECS = ("gzip", "snappy", "lz4")  # zstd needs Node.js 22.15's zlib


@pytest.fixture(scope="session")
def node_modules():
    return nodejs.installed(PLATFORMATIC, min_node=(20, 19, 4))


def test_idempotent_and_transactional_producers_and_a_group_reading_committed(broker, node_modules):
    topic, group = topic_name("platformatic"), topic_name("platformatic-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    run = nodejs.run(node_modules, "platformatic_produce_consume.mjs", broker.bootstrap, topic, group,
                     str(PER_PRODUCER))
    assert len(set(run["ids"])) == 3, run["ids"]  # the broker gave each producer an id of its own
    written = {f"{codec}-{i}" for codec in CODECS for i in range(PER_PRODUCER)}
    committed = [f"txn-commit-{n}" for n in (0, 2)] * 3  # one to each partition
    assert Counter(run["read"]) == Counter([*written, *committed]) and run["headers"]
    # every record stored once: a second producer's batches were not taken for the first's retries
    aborted = ["txn-abort-1"] * 3
    markers = 3 * 3  # each transaction's marker in each partition
    ends = [ck_watermarks(broker.bootstrap, topic, p)[1] for p in range(3)]
    assert sum(ends) == len(written) + len(committed) + len(aborted) + markers
    uncommitted: dict[str, Any] = {"isolation.level": "read_uncommitted"}
    stored = ck_consume(broker.bootstrap, topic, range(3), sum(ends) - markers, **uncommitted)
    assert Counter(bytes(r.value or b"").decode() for r in stored) == Counter([*written, *committed, *aborted])
    read_committed = ck_read_committed(broker.bootstrap, topic, range(3), len(written) + len(committed))
    assert Counter(v.decode() for v in read_committed) == Counter([*written, *committed])
    # the group's commits stand after the last record of every partition: before the
    # last transaction's marker, which this client does not count as read
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([ck.TopicPartition(topic, p) for p in range(3)], 30)
    finally:
        consumer.close()
    assert [tp.offset for tp in offsets] == [end - 1 for end in ends]
