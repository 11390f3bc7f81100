"""Produce acks 0/1/all with both clients, message size limits, list offsets
and offsets for times."""

import time

import confluent_kafka as ck
import kafka.errors
import pytest
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka.structs import TopicPartition as KpTopicPartition

from harness.broker import metadata_ping
from harness.waiting import wait_for
from tests.integration.clients import (
    ck_consume,
    ck_produce,
    ck_watermarks,
    kp_consume,
    kp_consumer,
    kp_produce,
    topic_name,
)

MESSAGE_MAX_BYTES = 1024 * 1024 + 12  # the broker's default message.max.bytes (a whole batch)
BATCH_OVERHEAD = 61 + 32  # batch header + one record's framing, generously


@pytest.mark.parametrize("acks", [0, 1, -1], ids=["acks0", "acks1", "acks-all"])
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_acks(broker, client, acks):
    topic = topic_name(f"acks{acks}")
    n = 300
    recs = [{"value": b"v%d" % i, "partition": 0} for i in range(n)]
    if client == "confluent":
        results = ck_produce(broker.bootstrap, topic, recs, acks=acks)
    else:
        results = kp_produce(broker.bootstrap, topic, recs, acks=acks if acks != -1 else "all",
                             enable_idempotence=False)
    if acks == 0:
        # no answer carries offsets; the records must still all arrive, in order
        wait_for(lambda: ck_watermarks(broker.bootstrap, topic)[1] == n, 15, "acks=0 records to land")
    else:
        assert [o for _, o in results] == list(range(n))
    got = ck_consume(broker.bootstrap, topic, [0], n)
    assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(n)]


def test_message_size_limit_confluent(broker):
    topic = topic_name("big-ck")
    near = b"n" * (MESSAGE_MAX_BYTES - BATCH_OVERHEAD)
    conf = {"message.max.bytes": 4 * MESSAGE_MAX_BYTES, "compression.type": "none", "linger.ms": 0}
    assert ck_produce(broker.bootstrap, topic, [{"value": near, "partition": 0}], **conf) == [(0, 0)]

    # over the limit: the broker refuses it and the producer sees MESSAGE_TOO_LARGE
    errors = []
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, **conf})
    p.produce(topic, value=b"o" * (MESSAGE_MAX_BYTES + 1), partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None and errors[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE

    # the broker keeps serving, and the refused record left no trace
    assert ck_produce(broker.bootstrap, topic, [{"value": b"after", "partition": 0}]) == [(0, 1)]
    got = ck_consume(broker.bootstrap, topic, [0], 2)
    assert [(r.offset, r.value) for r in got] == [(0, near), (1, b"after")]
    got = kp_consume(broker.bootstrap, topic, [0], 2)
    assert [(r.offset, None if r.value is None else len(r.value)) for r in got] == [(0, len(near)), (1, 5)]


def test_message_size_limit_kafka_python(broker):
    topic = topic_name("big-kp")
    big = b"o" * (MESSAGE_MAX_BYTES + 1)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=4 * MESSAGE_MAX_BYTES,
                                   enable_idempotence=False, retries=0)
    try:
        with pytest.raises(kafka.errors.MessageSizeTooLargeError):
            producer.send(topic, big, partition=0).get(30)
        assert producer.send(topic, b"small", partition=0).get(30).offset == 0
    finally:
        producer.close(5)
    assert metadata_ping(broker.host, broker.port)


def test_list_offsets_and_offsets_for_times(broker):
    topic = topic_name("times")
    base = int(time.time() * 1000) - 60_000
    stamps = [base + i * 1000 for i in range(10)]
    stamps[4] = base + 20_000  # out of order: the max timestamp is not the last record's
    ck_produce(broker.bootstrap, topic, [{"value": b"%d" % i, "timestamp": t, "partition": 0}
                                         for i, t in enumerate(stamps)])

    # target -> first offset whose timestamp >= target (None: past every record)
    cases = {base - 5: 0, base: 0, base + 2500: 3, base + 4500: 4, base + 9000: 4, base + 20_000: 4,
             base + 20_001: None}

    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "itest"})
    try:
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10) == (0, 10)
        for target, offset in cases.items():
            [tp] = c.offsets_for_times([ck.TopicPartition(topic, 0, target)], timeout=10)
            assert tp.error is None
            assert tp.offset == (ck.OFFSET_END if offset is None else offset), target
    finally:
        c.close()

    kc = kp_consumer(broker.bootstrap)
    try:
        tp = KpTopicPartition(topic, 0)
        assert kc.beginning_offsets([tp]) == {tp: 0}
        assert kc.end_offsets([tp]) == {tp: 10}
        for target, offset in cases.items():
            found = kc.offsets_for_times({tp: target})[tp]
            if offset is None:
                assert found is None, target
            else:
                assert found is not None, target
                assert (found.offset, found.timestamp) == (offset, stamps[offset]), target
    finally:
        kc.close()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    max_timestamp = OffsetSpec.max_timestamp()
    assert max_timestamp is not None  # set when confluent_kafka.admin is imported
    specs: dict[ck.TopicPartition, OffsetSpec] = {ck.TopicPartition(topic, 0): max_timestamp}
    result = admin.list_offsets(specs, request_timeout=10)[ck.TopicPartition(topic, 0)].result(10)
    assert (result.offset, result.timestamp) == (4, stamps[4])


def test_acks_all_needs_min_insync_replicas(broker):
    """A lone broker's ISR is one replica: a topic asking for two in sync
    refuses acks=all with NOT_ENOUGH_REPLICAS (nothing appended) and takes acks=1."""
    topic = topic_name("min-isr")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"min.insync.replicas": "2"})])[topic].result(30)
    errors = []
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": 2000,
                            "retry.backoff.ms": 100})
    producer.produce(topic, value=b"refused", partition=0, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (ck.KafkaError.NOT_ENOUGH_REPLICAS, ck.KafkaError._MSG_TIMED_OUT)
    assert ck_produce(broker.bootstrap, topic, [{"value": b"taken", "partition": 0}], acks=1) == [(0, 0)]
    got = ck_consume(broker.bootstrap, topic, [0], 1)
    assert [(r.offset, r.value) for r in got] == [(0, b"taken")]
