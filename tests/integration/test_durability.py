"""Everything acknowledged survives: a clean stop (SIGTERM), a SIGKILL of the
whole process tree, and a SIGKILL of one worker under acks=all load."""

import threading

import confluent_kafka as ck

from harness.broker import free_port
from harness.waiting import wait_for
from tests.integration.clients import ck_consume, ck_consume_all, ck_produce, kp_consume, kp_produce, topic_name
from tests.integration.test_metrics import scrape_when, value


def _check(bootstrap, topic, partitions, expected: dict, consume=ck_consume):
    """expected: (partition, offset) -> value; everything must read back exactly."""
    got = consume(bootstrap, topic, partitions, len(expected))
    assert {(r.partition, r.offset): r.value for r in got} == expected


def test_restart_keeps_data(broker_factory):
    b = broker_factory({"num.partitions": "2"})
    topic = topic_name("restart")
    expected = {}

    def produce(tag, n):
        recs = [{"value": b"%s-%d" % (tag, i), "partition": i % 2} for i in range(n)]
        for r, pos in zip(recs, ck_produce(b.bootstrap, topic, recs, acks="all")):
            expected[pos] = r["value"]

    produce(b"a", 1000)
    b.restart()  # SIGTERM (asserts exit 0 and the clean-shutdown marker) + start
    _check(b.bootstrap, topic, [0, 1], expected)

    produce(b"b", 1000)  # offsets continue where they stopped
    assert sorted(o for p, o in expected if p == 0) == list(range(1000))

    b.kill()  # SIGKILL acceptor and workers together
    assert not (b.data_dir / ".kafka_cleanshutdown").exists(), "marker present after a crash"
    b.start()  # recovery runs
    _check(b.bootstrap, topic, [0, 1], expected, consume=kp_consume)
    produce(b"c", 10)
    assert sorted(o for p, o in expected if p == 1) == list(range(1005))


def test_sigkill_worker_under_load_loses_nothing_acknowledged(broker_factory):
    b = broker_factory({"log.flush.interval.messages": "1", "num.partitions": "4"})
    topic = topic_name("killworker")
    acked = {}  # (partition, offset) -> value
    failed = []
    stop = threading.Event()
    lock = threading.Lock()

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
        else:
            with lock:
                acked[(msg.partition(), msg.offset())] = msg.value()

    def load():
        # acks=all; librdkafka retries what a dead worker never answered
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 60000, "queue.buffering.max.messages": 5000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, value=b"r-%d" % i, partition=i % 4, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        assert p.flush(60) == 0

    producer = threading.Thread(target=load)
    producer.start()
    try:
        for index in range(b.num_workers):
            owned = [p for p in range(4) if _owner(topic, p, b.num_workers) == index]
            wait_for(lambda: len(acked) >= 2000, 30, "acknowledged records before the kill")
            with lock:
                before = {p: max((o for q, o in acked if q == p), default=-1) for p in owned}
                count = len(acked)
            b.kill_worker(index)
            # progress on the restarted worker's own partitions proves it serves again
            wait_for(lambda: all(any(q == p and o > before[p] for q, o in list(acked)) for p in owned), 30,
                     f"acks from restarted worker {index}")
            wait_for(lambda: len(acked) >= count + 2000, 30, "acks to resume")
    finally:
        stop.set()
        producer.join(90)
    assert not producer.is_alive()
    assert not failed, f"delivery failures: {failed[:3]}"
    got = ck_consume_all(b.bootstrap, topic, range(4))
    stored = {(r.partition, r.offset): r.value for r in got}
    lost = {pos: v for pos, v in acked.items() if stored.get(pos) != v}
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {sorted(lost.items())[:5]}"
    assert "restarting it" in b.log_text()


def _owner(topic, partition, workers):
    from hpbroker.server.ownership import partition_owner

    return partition_owner(topic, partition, workers)


def test_producers_to_partitions_that_fsync_every_message_share_the_fsyncs(broker_factory):
    """``log.flush.interval.messages=1``: every acknowledged record was fsynced
    before its answer, and concurrent producers' appends share the fsyncs
    (fewer than the Produce requests) instead of queueing for one each."""
    port = free_port()
    b = broker_factory({"log.flush.interval.messages": "1", "num.partitions": "2",
                        "metrics.listen": f"127.0.0.1:{port}"})
    topic = topic_name("groupcommit")
    acked: list = []
    lock = threading.Lock()

    def produce(name: str, count: int, client) -> None:
        records = [{"value": b"%s-%d" % (name.encode(), i), "partition": i % 2} for i in range(count)]
        positions = client(records)
        with lock:
            acked.extend(zip(positions, (r["value"] for r in records)))

    clients = [lambda records: ck_produce(b.bootstrap, topic, records, acks=1, **{"linger.ms": 0,
                                                                                  "batch.num.messages": 1})
               for _ in range(6)]
    clients.append(lambda records: kp_produce(b.bootstrap, topic, records, acks=1))
    threads = [threading.Thread(target=produce, args=(f"p{i}", 300, client)) for i, client in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads) and len(acked) == 7 * 300
    expected = dict(acked)
    assert len(expected) == len(acked), "two records acknowledged at one offset"
    got = kp_consume(b.bootstrap, topic, [0, 1], len(expected))
    assert {(r.partition, r.offset): r.value for r in got} == expected

    samples = wait_for(lambda: scrape_when(port, lambda s: value(s, "hpbroker_topic_records_in_total",
                                                                  topic=topic) == len(expected)),
                       30, "the counters of every append")
    produces = value(samples, "hpbroker_requests_total", api="Produce")
    fsyncs = value(samples, "hpbroker_fsync_seconds_count")
    assert 0 < fsyncs < produces, f"{fsyncs:.0f} fsyncs for {produces:.0f} Produce requests"


def test_megabyte_batches_leave_no_space_reserved_after_a_stop_or_a_crash(broker_factory):
    """Large appends reserve disk space past a segment's end (storage/space.py):
    a clean stop gives it back, and so does the clean stop after a SIGKILL left
    some; the records are all there either way."""
    b = broker_factory({"num.partitions": "1", "log.segment.bytes": str(8 << 20)})
    topic = topic_name("reserve")
    expected = {}

    def produce(tag: bytes, n: int):
        recs = [{"value": tag + b"-%06d-" % i + b"x" * 1000, "partition": 0} for i in range(n)]
        for r, pos in zip(recs, ck_produce(b.bootstrap, topic, recs, acks=1, **{"batch.size": 1_000_000,
                                                                                   "linger.ms": 50})):
            expected[pos] = r["value"]

    def held_past_the_end() -> list[tuple[str, int]]:
        segments = sorted((b.data_dir / f"{topic}-0").glob("*.log"))
        assert segments
        return [(s.name, s.stat().st_blocks * 512 - s.stat().st_size) for s in segments
                if s.stat().st_blocks * 512 > s.stat().st_size + 64 * 1024]

    produce(b"a", 20_000)  # about 20 MB: two rolled segments and an active one
    b.restart()  # SIGTERM
    assert held_past_the_end() == []
    produce(b"b", 5_000)
    b.kill()
    b.start()
    _check(b.bootstrap, topic, [0], expected)
    b.stop()
    assert held_past_the_end() == []
