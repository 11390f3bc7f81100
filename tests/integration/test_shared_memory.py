"""The broker's shared memory as operators meet it: a worker SIGKILLed while
its partitions move, the whole broker SIGKILLed, and clients reading offsets
all along (ListOffsets' earliest and latest come from the shared partition
table, answered by whichever worker holds the connection)."""

import os
import tempfile
import threading

import confluent_kafka as ck

from harness.waiting import wait_for
from hpbroker.server.ownership import partition_owner
from tests.integration.clients import topic_name

PARTITIONS = 4


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
