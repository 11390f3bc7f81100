"""The faults operators meet, driven with real clients against a real broker:
restarts under group consumers, fetches that name unknown topics or ask for
little, transactional producers, fuzzed requests, a full disk."""

import dataclasses
import datetime
import io
import os
import random
import shutil
import socket
import struct
import subprocess
import time

import confluent_kafka as ck
import kafka
import kafka.errors
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.structs import TopicPartition as KpTopicPartition
from kio.serial import entity_reader, entity_writer

from harness.broker import metadata_ping
from harness.request_samples import request_schema, response_schema, sample_entity
from harness.waiting import wait_for
from tests.fuzz_requests import mutations, seeds
from tests.integration.clients import ck_produce, topic_name


def _create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


# --- restarts -------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_group_consumers_carry_on_after_a_broker_restart(broker_factory, how):
    """librdkafka validates its position with OffsetForLeaderEpoch after every
    reconnect; kafka-python does not.  Both must keep consuming."""
    broker = broker_factory()
    topic = topic_name("restart")
    _create(broker.bootstrap, topic)
    confluent = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"ck-{topic}",
                             "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000,
                             "reconnect.backoff.max.ms": 500})
    confluent.subscribe([topic])
    kp = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"kp-{topic}",
                             auto_offset_reset="earliest", reconnect_backoff_max_ms=500)
    seen = {"confluent": set(), "kafka-python": set()}

    def poll_both():
        message = confluent.poll(0.2)
        if message is not None and message.error() is None:
            seen["confluent"].add(message.value())
        for records in kp.poll(200).values():
            seen["kafka-python"].update(r.value for r in records)

    def received(values):
        poll_both()
        return all(values <= got for got in seen.values())

    try:
        before = {b"before-%d" % i for i in range(50)}
        ck_produce(broker.bootstrap, topic, [{"value": v} for v in sorted(before)])
        wait_for(lambda: received(before), 60, "both consumers to read the first records")
        if how == "SIGTERM":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        after = {b"after-%d" % i for i in range(100)}
        ck_produce(broker.bootstrap, topic, [{"value": v} for v in sorted(after)])
        wait_for(lambda: received(after), 30, f"both consumers to read what was produced after the {how} restart")
    finally:
        confluent.close()
        kp.close()


# --- fetch ----------------------------------------------------------------------------
def _roundtrip(broker, api_key: int, version: int, request):
    """Send one request (kio object) with a v1/v2 header, return the decoded response."""
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    flexible = type(request).__flexible__
    header = struct.pack(">hhih", api_key, version, 42, 4) + b"test" + (b"\x00" if flexible else b"")
    frame = header + body.getvalue()
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv(s, 4))[0]
        data = _recv(s, size)
    assert struct.unpack_from(">i", data)[0] == 42
    response, _ = entity_reader(response_schema(api_key, version))(data, 5 if flexible else 4)
    return response


def _recv(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed by the broker"
        out += chunk
    return out


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_below_v13_of_an_unknown_topic_is_answered(broker, version):
    """Named topics (before v13) that do not exist get UNKNOWN_TOPIC_OR_PARTITION,
    not a closed connection."""
    sample = sample_entity(request_schema(1, version))
    wanted = dataclasses.replace(sample.topics[0], topic="no-such-topic", partitions=(
        dataclasses.replace(sample.topics[0].partitions[0], partition=0, fetch_offset=0),))
    request = dataclasses.replace(sample, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1,
                                  isolation_level=0, topics=(wanted,), **_no_session(sample))
    response = _roundtrip(broker, 1, version, request)
    [result] = response.responses
    assert result.topic == "no-such-topic"
    assert [p.error_code.value for p in result.partitions] == [3]


def _no_session(request) -> dict:
    """A full fetch outside any fetch session (v7+ carry session fields)."""
    if not hasattr(request, "session_id"):
        return {}
    return {"session_id": 0, "session_epoch": -1, "forgotten_topics_data": ()}


def test_a_fetch_response_stays_within_fetch_max_bytes(broker):
    """librdkafka's max.partition.fetch.bytes (1 MiB) exceeds a fetch.max.bytes
    of 1 MB; the response must not, or librdkafka fails it ("Invalid response
    size") when receive.message.max.bytes is set to match."""
    topic = topic_name("maxbytes")
    _create(broker.bootstrap, topic, partitions=4)
    values = [os.urandom(1000) for _ in range(6000)]  # ~1.5 MB per partition, in ~16 KB batches
    ck_produce(broker.bootstrap, topic, [{"value": v, "partition": i % 4} for i, v in enumerate(values)])
    errors = []
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                            "auto.offset.reset": "earliest", "fetch.max.bytes": 1_000_000,
                            "receive.message.max.bytes": 1_000_512, "error_cb": errors.append})
    consumer.subscribe([topic])
    got = 0
    try:
        deadline = time.monotonic() + 60
        while got < len(values) and time.monotonic() < deadline and not errors:
            got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    assert not errors, errors[:3]
    assert got == len(values)


# --- fuzzed requests ------------------------------------------------------------------
# Admin requests that create or delete for real: a mutant asking for 16 million
# partitions is well formed, and would be obeyed as Kafka obeys it.
_DESTRUCTIVE = {19, 20, 21, 33, 37, 44}
FUZZ_SECONDS = 15


def _fuzz_connection(broker, frames: list[bytes]) -> None:
    """Send ``frames`` pipelined, close our side, read until the broker closes."""
    try:
        with socket.create_connection((broker.host, broker.port), timeout=5) as s:
            s.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
    except (ConnectionError, socket.timeout):
        pass  # closed on us for bad input: that is allowed, a dead worker is not


def test_fuzzed_requests_crash_no_worker(broker_factory):
    broker = broker_factory()
    topic = topic_name("fuzz")
    _create(broker.bootstrap, topic)
    workers = broker.worker_pids()
    rng = random.Random(7)
    pool = [frame for name, frame in seeds() if struct.unpack_from(">h", frame)[0] not in _DESTRUCTIVE]
    sent = 0
    deadline = time.monotonic() + FUZZ_SECONDS
    while time.monotonic() < deadline:
        frame = rng.choice(pool)
        batch = rng.sample(list(mutations(frame, rng, randoms=4)), 8)
        _fuzz_connection(broker, batch)
        sent += len(batch)
    assert sent > 500
    assert broker.worker_pids() == workers, f"a worker restarted:\n{broker.log_tail()}"
    assert metadata_ping(broker.host, broker.port)
    assert ck_produce(broker.bootstrap, topic, [{"value": b"still here"}])
    assert "Traceback" not in broker.log_text(since_start=True), broker.log_tail(120)


# --- a full disk ----------------------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path):
    """A 16 MiB tmpfs (root only, as on a CI machine)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "tiny"
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_refuses_writes_with_an_error_and_loses_nothing(broker_factory, tiny_disk):
    broker = broker_factory(data_dir=tiny_disk / "data")
    topic = topic_name("full")
    _create(broker.bootstrap, topic, partitions=1)
    filler = tiny_disk / "filler"
    stat = os.statvfs(tiny_disk)
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 256 * 1024))  # leave 256 KiB
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, acks=1)
    acked, failed = [], []
    for i in range(1000):
        future = producer.send(topic, value=b"%06d" % i + os.urandom(994))
        future.add_callback(lambda md, i=i: acked.append(i)).add_errback(lambda exc: failed.append(exc))
    producer.flush(30)
    assert failed and all(isinstance(e, kafka.errors.KafkaStorageError) for e in failed), failed[:3]
    rejections = broker.log_text(since_start=True).count("rejected")
    assert 1 <= rejections <= 2, f"{len(failed)} failed requests logged {rejections} lines: one a minute is enough"
    filler.unlink()  # the operator frees space; the broker serves writes again
    producer.send(topic, value=b"after").get(30)
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                   consumer_timeout_ms=3000)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    stored = [m.value for m in consumer]
    consumer.close()
    assert [int(v[:6]) for v in stored[:-1]] == sorted(acked)  # every acknowledged record, nothing else
    assert stored[-1] == b"after"
    broker.stop()  # cleanly, before the fixture takes the disk away
