"""The broker's shared memory as operators meet it: a worker SIGKILLed while
its partitions move, the whole broker SIGKILLed, and clients reading offsets
all along (ListOffsets' earliest and latest come from the shared partition
table, answered by whichever worker holds the connection); records produced
to another worker's partitions, which travel through the payload arena."""

import hashlib
import os
import tempfile
import threading

import confluent_kafka as ck

from harness.broker import free_port
from harness.waiting import wait_for
from hpbroker.server.ownership import partition_owner
from tests.integration.clients import ck_consume, ck_consume_all, ck_produce, kp_consume, kp_produce, topic_name
from tests.integration.test_metrics import scrape_when, value
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

PARTITIONS = 4
# these tests are about records crossing to another worker's partition: the partitions stay where their
# hash puts them, rather than following clients that all landed on one worker (workers/partition_moves.py)
CROSSING = {"partition.move.after.appends": "0"}


def _watermarks(consumer: ck.Consumer, topic: str) -> list[int]:
    """Each partition's high watermark, by ListOffsets latest."""
    return [consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)]


def test_offsets_read_while_a_worker_is_killed_never_go_back_or_run_ahead(broker_factory):
    """A reader of the table during a worker's death and restart sees every
    partition's latest offset only grow, and never past what was appended."""
    broker = broker_factory({"num.partitions": str(PARTITIONS)}, num_workers=2)
    topic = topic_name("shm-kill")
    acked = [0] * PARTITIONS
    lock = threading.Lock()
    stop = threading.Event()
    problems: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            with lock:
                acked[msg.partition()] = max(acked[msg.partition()], msg.offset() + 1)

    def produce():
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1,
                                "message.timeout.ms": 60000})
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, b"v%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(60)

    seen = [0] * PARTITIONS

    def read_offsets():
        consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "shm-reader"})
        try:
            while not stop.is_set():
                try:
                    latest = _watermarks(consumer, topic)
                except ck.KafkaException:
                    continue  # the owner restarting: retriable, as for any client
                for p, offset in enumerate(latest):
                    if offset < seen[p]:
                        problems.append(f"partition {p}: latest went back from {seen[p]} to {offset}")
                    seen[p] = max(seen[p], offset)
        finally:
            consumer.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=read_offsets)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: min(seen) > 100, 60, "offsets read on every partition")
        for index in range(broker.num_workers):
            before = list(seen)
            broker.kill_worker(index)
            owned = [p for p in range(PARTITIONS) if partition_owner(topic, p, broker.num_workers) == index]
            wait_for(lambda: all(seen[p] > before[p] for p in owned), 60,
                     f"worker {index}'s partitions read as growing again after its restart")
    finally:
        stop.set()
        for thread in threads:
            thread.join(90)
    assert not problems, problems[:5]
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "shm-final"})
    try:
        final = _watermarks(consumer, topic)
    finally:
        consumer.close()
    assert final == acked, "the table's latest offsets are the appended ends"
    assert all(s <= f for s, f in zip(seen, final)), "a reader saw an offset beyond the log end"


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6}


def test_a_broker_killed_whole_leaves_no_shared_memory_and_its_samples_are_swept(broker_factory):
    broker = broker_factory()
    topic = topic_name("shm-whole")
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    killed = broker.pid
    samples = [name for name in os.listdir(tempfile.gettempdir())
               if name.startswith(f"hpbroker-metrics-{killed}-")]
    assert len(samples) == 1
    mapped = set().union(*(_mapped_files(pid) for pid in [killed, *broker.worker_pids().values()]))
    # the shared memory is anonymous (inherited by fork): nothing named in /dev/shm could outlive a SIGKILL
    assert not [name for name in mapped if name.startswith("/dev/shm/")]
    assert any(name.startswith("/dev/zero") for name in mapped)
    broker.kill()
    assert os.path.isdir(os.path.join(tempfile.gettempdir(), samples[0]))  # SIGKILL: nobody removed it
    broker.start()
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), samples[0])), "the next broker swept it"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "shm-whole"})
    try:
        low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()
    assert (low, high) == (0, 1)


def _value(i: int) -> bytes:
    """Sizes from 1 byte to 200 KB, each checkable on its own."""
    body = hashlib.sha256(b"%d" % i).digest() * (1 + (i * 7919) % 6250)
    return body[:1 + (i * 104729) % len(body)]


def test_records_for_another_workers_partitions_arrive_whole_through_the_arena(broker_factory):
    """Both clients, compressed and not: every value read back as sent; the
    bytes moved between workers went by reference, none inline: large
    requests' records where the connection received them, small ones copied
    into a slot."""
    port = free_port()
    broker = broker_factory({"num.partitions": str(PARTITIONS), "metrics.listen": f"127.0.0.1:{port}",
                             **CROSSING}, num_workers=2)
    topic = topic_name("shm-arena")
    sent = {i: _value(i) for i in range(400)}
    sent.update({i: b"small %d" % i for i in range(400, 420)})  # requests small enough for the connection's scratch
    records = [{"key": b"%d" % i, "value": v, "partition": i % PARTITIONS} for i, v in sent.items()]
    lz4: dict = {"compression.type": "lz4"}
    ck_produce(broker.bootstrap, topic, records[:100], **lz4)
    ck_produce(broker.bootstrap, topic, records[100:200])  # uncompressed: requests far above the scratch
    kp_produce(broker.bootstrap, topic, records[200:400], compression_type="gzip")
    ck_produce(broker.bootstrap, topic, records[400:])
    got = ck_consume(broker.bootstrap, topic, range(PARTITIONS), len(sent), timeout=60)
    assert sorted((int(r.key or b"-1"), r.value) for r in got) == sorted(sent.items())
    again = kp_consume(broker.bootstrap, topic, range(PARTITIONS), len(sent), timeout=60)
    assert sorted((int(r.key or b"-1"), r.value) for r in again) == sorted(sent.items())
    assert len({(r.partition, r.offset) for r in got}) == len(sent)
    owners = {partition_owner(topic, p, 2) for p in range(PARTITIONS)}
    assert owners == {0, 1}, "some partitions are owned by the worker not holding a connection"

    def moved(samples: dict) -> bool:
        return all(value(samples, "hpbroker_peer_payload_bytes_total", path=path) > 0 for path in ("arena", "received"))
    samples = wait_for(lambda: scrape_when(port, moved), timeout=30, what="arena bytes counted")
    assert value(samples, "hpbroker_peer_payload_bytes_total", path="inline") == 0


def _large_value(client: str, i: int) -> bytes:
    """About 6 KiB, its name first and a digest of it repeated after: checkable whole."""
    name = b"%s-%d:" % (client.encode(), i)
    return name + hashlib.sha256(name).digest() * 190


def test_records_sent_by_reference_survive_worker_kills(broker_factory):
    """Both clients, idempotent, write large requests to every partition (so
    half of them go to the other worker by reference to where they were
    received) while one worker and then the other is SIGKILLed: every record
    either acknowledged is in the log whole, and none twice."""
    port = free_port()
    broker = broker_factory({"num.partitions": str(PARTITIONS), "metrics.listen": f"127.0.0.1:{port}",
                             **CROSSING}, num_workers=2)
    topic = topic_name("shm-kill")
    total = 3000
    acked = produce_through_worker_kills(broker, topic, total, _large_value, lambda _, i: i % PARTITIONS,
                                         linger_ms=20, pace_every=10, pace_s=0.002)
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    values = [r.value or b"" for r in ck_consume_all(broker.bootstrap, topic, range(PARTITIONS))]
    assert_acknowledged_once(values, acked["ck"] | acked["kp"])
    for v in values:
        client, _, i = v.partition(b":")[0].partition(b"-")
        assert v == _large_value(client.decode(), int(i)), "a record is whole"
    samples = wait_for(lambda: scrape_when(port, lambda s: value(s, "hpbroker_peer_payload_bytes_total",
                                                                  path="received") > 0),
                       timeout=30, what="bytes sent by reference counted")
    assert value(samples, "hpbroker_peer_payload_bytes_total", path="inline") == 0
