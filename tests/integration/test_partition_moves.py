"""A standalone partition moves to the worker whose connections alone write it
(``workers/partition_moves.py``), and loses nothing on the way: every
acknowledged record is read back once and in order, by both clients, across
the move, a worker SIGKILLed after it, and a broker stopped (SIGTERM) or
killed (SIGKILL) after it.  Connections on both workers that each write
both partitions gather on one worker and the partition follows them; a
saturated worker hands it back; with gathering off, such a partition stays
where it is."""

import asyncio
import datetime
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from harness.broker import free_port
from harness.waiting import wait_for
from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch
from hpbroker.replication.client import ClientConnection
from hpbroker.workers.affinity import spot_of
from hpbroker.workers.kio_build import make
from tests.integration.clients import ck_consume, ck_consume_all, kp_consume, topic_name
from tests.integration.test_metrics import scrape, scrape_when, value
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

MOVED = "hpbroker_partitions_moved_total"


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _moved(port: int, at_least: int) -> dict:
    return wait_for(lambda: scrape_when(port, lambda s: value(s, MOVED) >= at_least), 30,
                    f"{at_least} partition moves counted")


def _numbered(records, partitions) -> dict[int, list[int]]:
    """Each partition's values (numbers) in log order."""
    found: dict[int, list[int]] = {p: [] for p in partitions}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        found[r.partition].append(int(r.value or b"0"))
    return found


def test_one_producer_writing_both_workers_partitions_gets_both_on_its_worker(broker_factory):
    """librdkafka's one connection, idempotent, writes a topic's two partitions
    (one per worker): the partition of the other worker moves to the one
    holding the connection, once; the records before and after the move are
    all there, each once, in the order sent, read by both clients."""
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}"}, num_workers=2)
    topic = topic_name("pmove")
    _create(broker.bootstrap, topic, 2)
    total, per_request = 20000, 100
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2})
    failures: list = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err)

    for i in range(total):
        producer.produce(topic, b"%d" % i, partition=i % 2, on_delivery=delivered)
        if i % per_request == per_request - 1:  # one request of both partitions' batches at a time
            assert producer.flush(30) == 0
    assert producer.flush(60) == 0 and not failures
    samples = _moved(port, 1)
    assert value(samples, MOVED) == 1, "one partition moved, once"
    expected = {p: list(range(p, total, 2)) for p in (0, 1)}
    assert _numbered(ck_consume(broker.bootstrap, topic, [0, 1], total), [0, 1]) == expected
    assert _numbered(kp_consume(broker.bootstrap, topic, [0, 1], total), [0, 1]) == expected
    assert "moved to worker" in broker.log_text(since_start=True)


def _produce_request(topic: str, partition: int, value: bytes) -> ProduceRequest:
    batch = encode_batch([Record(0, 0, None, value)])
    return make(ProduceRequest, transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=30)), topic_data=(make(TopicProduceData, name=TopicName(topic), partition_data=(
            make(PartitionProduceData, index=i32(partition), records=batch),)),))


def test_a_partition_both_workers_write_stays_where_it_is(broker_factory):
    """Four connections spread over both workers, each writing both partitions
    in turn, with gathering off: every worker forwards appends to the other's
    partition, but each owner writes its own too, so neither lets its
    partition go."""
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}", "connection.gather.max.cpu.percent": "0"},
                            num_workers=2)
    topic = topic_name("pstay")
    _create(broker.bootstrap, topic, 2)
    rounds = 200  # each connection forwards about 100 appends: six times what asks for a partition

    async def produce() -> set[int]:
        conns = [await ClientConnection.open(broker.host, broker.port, f"writer-{i}") for i in range(4)]
        holders = {broker.worker_serving(c.get_extra_info("sockname")[1]) for c in conns}
        for round_ in range(rounds):
            answers = await asyncio.gather(*(c.send(_produce_request(topic, (round_ + i) % 2, b"%d" % round_))
                                             for i, c in enumerate(conns)))
            assert all(a.responses[0].partition_responses[0].error_code == ErrorCode.none for a in answers)
        for c in conns:
            c.close()
        return holders

    assert asyncio.run(produce()) == {0, 1}, "the acceptor spread the connections over both workers"
    samples = scrape(port)
    assert value(samples, MOVED) == 0
    assert len(ck_consume_all(broker.bootstrap, topic, [0, 1])) == 4 * rounds


def test_connections_writing_both_workers_partitions_gather_on_one_and_the_partition_follows(broker_factory):
    """Four connections spread over both workers, each writing both partitions
    in turn (producers of a keyless topic): they all go to worker 0, the
    lowest-numbered worker they write to, and worker 1's partition follows
    them once; every record is read back once, each connection's in the
    order sent, by both clients."""
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}"}, num_workers=2)
    topic = topic_name("pgather")
    _create(broker.bootstrap, topic, 2)
    deadline = time.monotonic() + 60

    async def produce() -> tuple[set, set, int]:
        conns = [await ClientConnection.open(broker.host, broker.port, f"writer-{i}") for i in range(4)]
        ports = [c.get_extra_info("sockname")[1] for c in conns]
        before = {broker.worker_serving(p) for p in ports}
        round_ = 0
        # 300 rounds at least, then on until the move is counted (a first ask may meet a connection still there)
        while round_ < 300 or (round_ % 50 or value(scrape(port), MOVED) < 1) and time.monotonic() < deadline:
            answers = await asyncio.gather(*(c.send(_produce_request(topic, (round_ + i) % 2, b"%d-%d" % (i, round_)))
                                             for i, c in enumerate(conns)))
            assert all(a.responses[0].partition_responses[0].error_code == ErrorCode.none for a in answers)
            round_ += 1
        after = {broker.worker_serving(p) for p in ports}
        for c in conns:
            c.close()
        return before, after, round_

    before, after, rounds = asyncio.run(produce())
    assert before == {0, 1}, "the acceptor spread the connections over both workers"
    assert after == {0}, "they gathered on worker 0"
    assert value(scrape(port), MOVED) == 1, "worker 1's partition followed them, once"

    _assert_each_writers_rounds_in_order(broker, topic, rounds)


def test_a_saturated_worker_spreads_out_what_gathered_on_it(broker_factory):
    """With the spreading share at 0% (every worker counts as saturated) and
    the workers unpinned: the four connections gather on worker 0 and worker
    1's partition follows them, then worker 0 spreads out: the partition goes
    back to worker 1, each connection goes to the worker its client port
    names, and nothing gathers again; every record is read back once, each
    connection's in order."""
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}", "connection.gather.spread.cpu.percent": "0",
                             "worker.cpu.affinity": "none", "worker.heartbeat.interval.ms": "500"},
                            num_workers=2)
    topic = topic_name("pspread")
    _create(broker.bootstrap, topic, 2)
    deadline = time.monotonic() + 60

    def spread() -> bool:
        return "go back to their hashed owners" in broker.log_text(since_start=True)

    async def produce() -> tuple[dict, dict, int]:
        conns = [await ClientConnection.open(broker.host, broker.port, f"writer-{i}") for i in range(4)]
        ports = [c.get_extra_info("sockname")[1] for c in conns]
        round_ = 0
        until = None  # 200 rounds more once worker 0 spread out, for the connections to leave
        while (until is None or round_ < until) and time.monotonic() < deadline:
            answers = await asyncio.gather(*(c.send(_produce_request(topic, (round_ + i) % 2, b"%d-%d" % (i, round_)))
                                             for i, c in enumerate(conns)))
            assert all(a.responses[0].partition_responses[0].error_code == ErrorCode.none for a in answers)
            round_ += 1
            if until is None and round_ % 50 == 0 and spread():
                until = round_ + 200
        after = {p: broker.worker_serving(p) for p in ports}
        for c in conns:
            c.close()
        return after, {p: spot_of(p, 2) for p in ports}, round_

    after, spots, rounds = asyncio.run(produce())
    assert spread(), "worker 0 spread out"
    assert value(scrape(port), MOVED) == 2, "worker 1's partition came to worker 0, then went back"
    assert after == spots, "each connection on the worker its port names"
    _assert_each_writers_rounds_in_order(broker, topic, rounds)


def _assert_each_writers_rounds_in_order(broker, topic: str, rounds: int) -> None:
    """Four writers, writer ``i`` sending ``b"i-round"`` to partition ``(round + i) % 2``
    each round: both clients read every record once, each writer's in the order sent."""
    expected = {(i, r % 2): list(range(r - i, rounds, 2)) for i in range(4) for r in (i, i + 1)}
    for records in (ck_consume(broker.bootstrap, topic, [0, 1], 4 * rounds),
                    kp_consume(broker.bootstrap, topic, [0, 1], 4 * rounds)):
        found: dict[tuple[int, int], list[int]] = {}
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            writer, round_ = map(int, (r.value or b"").split(b"-"))
            found.setdefault((writer, r.partition), []).append(round_)
        assert found == expected


def test_moved_partitions_lose_no_acknowledged_record_when_workers_are_killed(broker_factory):
    """librdkafka writes partitions 0 and 1 over its one connection (so one of
    them moves to that connection's worker), kafka-python writes partition 2;
    once a partition has moved, first one worker and then the other is
    SIGKILLed: every acknowledged record is in the log, none twice, and the
    partitions are served again wherever the restarted workers find them."""
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}"}, num_workers=2)
    topic = topic_name("pmove-kill")
    _create(broker.bootstrap, topic, 3)
    total = 4000
    acked = produce_through_worker_kills(broker, topic, total, lambda client, i: b"%s-%d" % (client.encode(), i),
                                         lambda client, i: i % 2 if client == "ck" else 2,
                                         linger_ms=0, pace_every=5, pace_s=0.001,
                                         before_kills=lambda: _moved(port, 1))
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    values = [r.value or b"" for r in ck_consume_all(broker.bootstrap, topic, [0, 1, 2])]
    assert_acknowledged_once(values, acked["ck"] | acked["kp"])


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_a_broker_stopped_after_a_move_opens_every_partition_where_its_hash_says(broker_factory, stop):
    """An idempotent producer writes both partitions through one connection
    until one has moved, and on; the broker is stopped (SIGTERM: flushed and
    clean; SIGKILL: recovered from the page cache) and started again, with
    the partitions back with their hashed owners: everything acknowledged is
    there once, and the same producer's next records follow it."""
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}"}, num_workers=2)
    topic = topic_name(f"pmove-{stop}")
    _create(broker.bootstrap, topic, 2)
    acked: set[bytes] = set()
    lock = threading.Lock()

    def delivered(err, msg) -> None:
        if err is None:
            with lock:
                acked.add(msg.value())

    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                            "message.timeout.ms": 120000})

    def send(first: int, count: int, one_request_at_a_time: bool = True) -> None:
        for i in range(first, first + count):
            producer.produce(topic, b"%d" % i, partition=i % 2, on_delivery=delivered)
            if i % 100 == 99:  # a request of both partitions' batches every hundred records
                if one_request_at_a_time:
                    producer.flush(30)
                else:
                    producer.poll(0)

    send(0, 5000)
    producer.flush(60)
    _moved(port, 1)
    send(5000, 2000, one_request_at_a_time=False)  # some still in flight when the broker stops
    if stop == "sigterm":
        producer.flush(60)
        broker.stop()
    else:
        broker.kill()
    broker.start()
    send(7000, 2000)
    assert producer.flush(120) == 0
    values = [r.value or b"" for r in ck_consume_all(broker.bootstrap, topic, [0, 1])]
    assert_acknowledged_once(values, acked)
    # each partition's records in the order sent
    numbers = _numbered([r for r in ck_consume_all(broker.bootstrap, topic, [0, 1])], [0, 1])
    for p in (0, 1):
        assert numbers[p] == sorted(numbers[p])
    if stop == "sigterm":
        assert len(acked) == 9000
