"""Thin, uniform wrappers over confluent-kafka, kafka-python and aiokafka for the tests:
produce returns what the broker acknowledged, consume returns plain records,
so a test can produce with one client and check with the other."""

import asyncio
import itertools
import os
import time
from dataclasses import dataclass

import aiokafka
import confluent_kafka as ck
import kafka  # kafka-python
from kafka.structs import TopicPartition as KpTopicPartition

_names = itertools.count()


def topic_name(prefix: str) -> str:
    """Unique per test run, so module-scoped brokers never see stale topics."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple  # ((str, bytes), ...)
    timestamp: int


# --- confluent-kafka --------------------------------------------------------------
def ck_producer(bootstrap: str, **conf) -> ck.Producer:
    return ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})


def ck_produce(bootstrap: str, topic: str, records, timeout: float = 30, **conf) -> list:
    """records: dicts with value and optional key/headers/timestamp/partition.
    Returns [(partition, offset)] in the order given; raises on any delivery error."""
    producer = ck_producer(bootstrap, **conf)
    results = [None] * len(records)

    def delivered(i):
        def cb(err, msg):
            results[i] = err if err is not None else (msg.partition(), msg.offset())
        return cb

    for i, r in enumerate(records):
        kwargs = {k: r[k] for k in ("key", "headers", "timestamp", "partition") if k in r}
        while True:
            try:
                producer.produce(topic, value=r["value"], on_delivery=delivered(i), **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(timeout)
    assert left == 0, f"{left} records not delivered within {timeout} s"
    errors = [r for r in results if isinstance(r, ck.KafkaError)]
    assert not errors, f"delivery errors: {errors[:3]}"
    return results


def ck_consume(bootstrap: str, topic: str, partitions, count: int, timeout: float = 30, **conf) -> list[Rec]:
    """Read ``count`` records from offset 0 of ``partitions`` (assign, no group)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "itest", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", **conf})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            for m in consumer.consume(min(1000, count - len(out)), 0.5):
                error = m.error()
                if error:
                    if error.code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {error}")
                partition, offset = m.partition(), m.offset()
                assert partition is not None and offset is not None  # a record, not an event
                out.append(Rec(partition, offset, m.key(), m.value(),
                               tuple((k, v) for k, v in (m.headers() or [])), m.timestamp()[1]))
    finally:
        consumer.close()
    return out


def ck_watermarks(bootstrap: str, topic: str, partition: int = 0, **conf) -> tuple[int, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "itest", **conf})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def ck_consume_all(bootstrap: str, topic: str, partitions, timeout: float = 60, **conf) -> list[Rec]:
    """Everything below the high watermarks (retries may have stored more
    records than were acknowledged, so a count from the producer is not enough);
    ``conf``: the client's settings for the listener (a login, TLS)."""
    total = sum(ck_watermarks(bootstrap, topic, p, **conf)[1] for p in partitions)
    got = ck_consume(bootstrap, topic, partitions, total, timeout, **conf)
    assert len(got) == total, f"read {len(got)} of {total} records below the high watermarks"
    return got


def ck_read_committed(bootstrap: str, topic: str, partitions, expected: int, timeout: float = 60) -> list[bytes]:
    """The values a read_committed consumer reads from the start of ``partitions``,
    once at least ``expected`` came and every partition's end (its last stable
    offset) is reached: what a transaction's outcome looks like to a reader."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-committed-{time.monotonic_ns()}",
                            "isolation.level": "read_committed", "enable.partition.eof": True,
                            "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(topic, p) for p in partitions])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (len(values) < expected or len(at_end) < len(partitions)):
            m = consumer.poll(0.5)
            if m is None:
                continue
            error = m.error()
            if error is not None:
                if error.code() == ck.KafkaError._PARTITION_EOF:
                    at_end.add(m.partition() or 0)
                continue
            at_end.discard(m.partition() or 0)
            value = m.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


# --- kafka-python -------------------------------------------------------------------
def kp_produce(bootstrap: str, topic: str, records, timeout: float = 30, **conf) -> list:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **conf)
    try:
        futures = []
        for r in records:
            futures.append(producer.send(topic, value=r["value"], key=r.get("key"), headers=r.get("headers"),
                                         timestamp_ms=r.get("timestamp"), partition=r.get("partition")))
        producer.flush(timeout)
        results = []
        for f in futures:
            md = f.get(timeout)
            results.append((md.partition, md.offset))
        return results
    finally:
        producer.close(timeout=5)


def kp_consumer(bootstrap: str, **conf) -> kafka.KafkaConsumer:
    return kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                               auto_offset_reset="earliest", **conf)


def kp_consume(bootstrap: str, topic: str, partitions, count: int, timeout: float = 30, **conf) -> list[Rec]:
    consumer = kp_consumer(bootstrap, **conf)
    tps = [KpTopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            for _tp, msgs in consumer.poll(timeout_ms=500, max_records=count - len(out)).items():
                for m in msgs:
                    out.append(Rec(m.partition, m.offset, m.key, m.value,
                                   tuple((k, v) for k, v in (m.headers or [])), m.timestamp))
    finally:
        consumer.close()
    return out


PRODUCE = {"confluent": ck_produce, "kafka-python": kp_produce}
CONSUME = {"confluent": ck_consume, "kafka-python": kp_consume}


# --- kafka-python and aiokafka together -----------------------------------------------
def python_clients_round_trip(bootstrap: str, topic: str, kp_conf: dict, ak_conf: dict, count: int = 50) -> list:
    """``count`` records from an idempotent kafka-python producer, as many from
    aiokafka, all to partition 0, then every one read back by an aiokafka
    consumer; each client with its settings for the listener (a login, TLS)."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **kp_conf)
    futures = [producer.send(topic, b"kp-%d" % i, partition=0) for i in range(count)]
    producer.flush(30)
    assert all(f.get(10) for f in futures)
    producer.close(10)

    async def with_aiokafka() -> list[bytes]:
        sender = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, **ak_conf)
        await sender.start()
        try:
            for i in range(count):
                await sender.send_and_wait(topic, b"ak-%d" % i, partition=0)
        finally:
            await sender.stop()
        reader = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                           **ak_conf)
        await reader.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 2 * count and time.monotonic() < deadline:
                for records in (await reader.getmany(timeout_ms=500)).values():
                    got += [r.value or b"" for r in records]
        finally:
            await reader.stop()
        return got
    return asyncio.run(with_aiokafka())
