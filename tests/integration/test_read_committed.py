"""read_committed with real clients: librdkafka (whose default it is) and
kafka-python. The transaction coordinator is not built yet, so the
transactional batches and their markers are written into the partition's log
with the broker stopped, as the coordinator will write them with it running
(``Log.append(origin=ORIGIN_COORDINATOR)``); the broker then serves the log.
A read_committed consumer must stop at an open transaction, never see an
aborted record, and see a committed one; read_uncommitted sees every data
record; nobody sees a marker."""

import time
from typing import Literal

import confluent_kafka as ck
import kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.structs import TopicPartition as KpTopicPartition

from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.records.control import ABORT, COMMIT
from hpbroker.storage import Log, LogConfig
from hpbroker.storage.log import ORIGIN_COORDINATOR
from tests.integration.clients import topic_name

ABORTED, COMMITTED = 1000, 2000  # producer ids


def batch(*values: bytes, pid: int = -1) -> bytes:
    return encode_batch([Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)],
                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                        transactional=pid >= 0)


def offline_append(broker, topic: str, *chunks: bytes) -> None:
    """Append to partition 0 of ``topic`` as the broker's own writer would, the broker stopped."""
    log = Log.open(str(broker.data_dir / f"{topic}-0"), topic, 0, LogConfig(), clean_shutdown=True)
    try:
        for chunk in chunks:
            log.append(chunk, origin=ORIGIN_COORDINATOR)
    finally:
        log.close()


def ck_read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every record value up to the end a consumer with ``isolation`` may read."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "rc", "enable.auto.commit": False,
                            "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    values = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == ck.KafkaError._PARTITION_EOF, error
                return values
            values.append(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within 30 s; read {values}")


def kp_read(bootstrap: str, topic: str, isolation: Literal["read_committed", "read_uncommitted"],
            expected: int) -> list[bytes]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                   enable_auto_commit=False, consumer_timeout_ms=3000)
    partition = KpTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        # then nothing more arrives: what it may read ends here
        values += [r.value for records in consumer.poll(timeout_ms=1500).values() for r in records]
    finally:
        consumer.close()
    return values


def test_read_committed_consumers_skip_aborted_records_and_wait_at_an_open_transaction(broker_factory):
    broker = broker_factory()
    topic = topic_name("read-committed")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    broker.stop()
    offline_append(broker, topic, batch(b"before"), batch(b"aborted-1", b"aborted-2", pid=ABORTED),
                   batch(b"committed-1", pid=COMMITTED), batch(b"plain"))
    broker.start()
    # both transactions open: a read_committed reader stops at the first one's start
    assert ck_read(broker.bootstrap, topic, "read_committed") == [b"before"]
    assert kp_read(broker.bootstrap, topic, "read_committed", 1) == [b"before"]
    everything = [b"before", b"aborted-1", b"aborted-2", b"committed-1", b"plain"]
    assert ck_read(broker.bootstrap, topic, "read_uncommitted") == everything
    broker.stop()
    offline_append(broker, topic,
                   encode_control_batch(ABORT, producer_id=ABORTED, producer_epoch=0, coordinator_epoch=0),
                   encode_control_batch(COMMIT, producer_id=COMMITTED, producer_epoch=0, coordinator_epoch=0),
                   batch(b"last"))
    broker.start()
    committed = [b"before", b"committed-1", b"plain", b"last"]
    assert ck_read(broker.bootstrap, topic, "read_committed") == committed
    assert kp_read(broker.bootstrap, topic, "read_committed", len(committed)) == committed
    assert ck_read(broker.bootstrap, topic, "read_uncommitted") == everything + [b"last"]
