"""Transactions end to end (standalone): real broker processes, the
transactional producers of confluent-kafka, kafka-python and aiokafka, and
read_committed consumers of each.

* commit and abort with every producer; read_committed readers never see an
  aborted record nor a marker, see each committed one once; read_uncommitted
  sees everything;
* a read_committed reader waits at an open transaction (and at whatever
  others write after it), and moves on at its commit;
* fencing: a second instance of a transactional id aborts the first's open
  transaction, and the first fails at its next transactional step;
* a producer SIGKILLed in a transaction: the broker aborts it at its timeout,
  the last stable offset moves on; DescribeTransactions / ListTransactions
  (kafka-python's admin client) show it Ongoing, then CompleteAbort;
* broker SIGKILL / SIGTERM restarts with transactions open, ended, or decided
  but not yet completed (the markers still to write): ``__transaction_state``
  is replayed and every outcome holds;
* exactly-once consume-transform-produce (``txn_pipeline.py``) through
  pipeline and broker kills, checked over everything every reader saw;
* KIP-890: a transactional produce to a partition not in the transaction is
  refused INVALID_TXN_STATE and stores nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiokafka
import aiokafka.errors
import confluent_kafka as ck
import kafka
import kafka.errors
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.structs import TopicPartition as KpTopicPartition

from harness.broker import REPO
from harness.waiting import wait_for
from hpbroker.records import Record, encode_batch, iter_batches
from hpbroker.server.ownership import TRANSACTION_TOPIC, txn_partition
from hpbroker.storage import Log, LogConfig
from hpbroker.workers.transactions import records as txn_records
from hpbroker.workers.transactions.state import TxnState
from tests.integration.clients import topic_name
from tests.integration.conftest import module_broker

CLEANUP_MS = 200  # how often the coordinator looks for transactions past their timeout
OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(CLEANUP_MS)}
broker = module_broker(OVERRIDES)

PIPELINE = Path(__file__).with_name("txn_pipeline.py")
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
Isolation = Literal["read_committed", "read_uncommitted"]


# --- setup --------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def txn_producer(bootstrap: str, tid: str, **conf) -> ck.Producer:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    producer.init_transactions(30)
    return producer


def ck_send(producer: ck.Producer, topic: str, records: list[tuple[int, bytes]]) -> None:
    """Produce and wait until the broker has them all (so an abort has data to abort)."""
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0, "records not delivered"


# --- reading --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    partition: int
    offset: int
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def _ck_seen(m: ck.Message) -> Seen:
    partition, offset = m.partition(), m.offset()
    assert partition is not None and offset is not None  # a record, not an event
    headers = tuple((k, v.encode() if isinstance(v, str) else bytes(v or b"")) for k, v in (m.headers() or []))
    return Seen(partition, offset, m.value(), headers)


def ck_read(bootstrap: str, topic: str, partitions, isolation: Isolation, timeout: float = 30) -> list[Seen]:
    """Everything a librdkafka consumer with ``isolation`` reads from the start
    of ``partitions`` to their end (for read_committed: the LSO)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader", "enable.auto.commit": False,
                            "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    seen: list[Seen] = []
    ended: set[int] = set()

    def at_end() -> bool:
        for m in consumer.consume(1000, 0.2):
            error = m.error()
            if error is not None:
                assert error.code() == ck.KafkaError._PARTITION_EOF, error
                ended.add(m.partition() or 0)
                continue
            seen.append(_ck_seen(m))
            ended.discard(seen[-1].partition)
        return ended >= set(partitions)

    try:
        wait_for(at_end, timeout, f"a {isolation} confluent consumer to reach the end of {topic}", interval=0)
    finally:
        consumer.close()
    return seen


def kp_read(bootstrap: str, topic: str, partitions, isolation: Isolation, timeout: float = 30) -> list[Seen]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    tps = [KpTopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)  # the LSO for read_committed
    seen: list[Seen] = []

    def at_end() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            seen.extend(Seen(r.partition, r.offset, r.value, tuple((k, v) for k, v in (r.headers or [])))
                        for r in records)
        return all((consumer.position(tp) or 0) >= ends[tp] for tp in tps)

    try:
        wait_for(at_end, timeout, f"a {isolation} kafka-python consumer to reach {ends}", interval=0)
    finally:
        consumer.close()
    return seen


def aio_read(bootstrap: str, topic: str, partitions, isolation: Isolation, timeout: float = 30) -> list[Seen]:
    async def read() -> list[Seen]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                             enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [aiokafka.TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            seen: list[Seen] = []
            while not all([(await consumer.position(tp) or 0) >= ends[tp] for tp in tps]):
                batches = await consumer.getmany(timeout_ms=200)
                seen.extend(Seen(r.partition, r.offset, r.value, tuple((k, v) for k, v in r.headers))
                            for records in batches.values() for r in records)
            return seen
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(read(), timeout))


READERS = {"confluent": ck_read, "kafka-python": kp_read, "aiokafka": aio_read}


def ck_lso(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) of one partition."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-lso", "isolation.level": isolation})
        try:
            ends.append(consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)[1])
        finally:
            consumer.close()
    return ends[0], ends[1]


def values(seen: list[Seen]) -> list[bytes]:
    return [b"<null>" if s.value is None else s.value for s in seen]


def marker_positions(bootstrap: str, topic: str, partitions, everything: list[Seen]) -> set[tuple[int, int]]:
    """The offsets below each high watermark that hold no data record: the markers."""
    data = {(s.partition, s.offset) for s in everything}
    return {(p, o) for p in partitions for o in range(ck_lso(bootstrap, topic, p)[1])} - data


# --- the admin side ---------------------------------------------------------------------------
class TxnAdmin:
    """DescribeTransactions / ListTransactions through kafka-python's admin
    client (confluent-kafka's has neither)."""

    def __init__(self, bootstrap: str):
        # Any: pyright does not see the transactions mixin among KafkaAdminClient's bases
        self.client: Any = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)

    def describe(self, tid: str):
        return self.client.describe_transactions([tid])[tid]

    def state(self, tid: str) -> str:
        return self.describe(tid).state.value

    def listed(self, states=None) -> dict[str, str]:
        found = {}
        for rows in self.client.list_transactions(state_filters=states).values():
            found.update({row.transactional_id: row.state.value for row in rows})
        return found

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def admin(broker):
    a = TxnAdmin(broker.bootstrap)
    yield a
    a.close()


# --- 1. commit and abort with each producer ---------------------------------------------------
# (outcome, records to partition 0, records to partition 1) per transaction, in order
PLAN = [("commit", 3, 2), ("abort", 2, 2), ("commit", 1, 3), ("abort", 3, 0), ("commit", 0, 2), ("abort", 1, 1),
        ("commit", 2, 1)]


def plan_records(client: str, i: int, outcome: str, n0: int, n1: int) -> list[tuple[int, bytes]]:
    return [(p, f"{client}-t{i}-{outcome}-p{p}-{k}".encode()) for p, n in ((0, n0), (1, n1)) for k in range(n)]


def run_confluent(bootstrap: str, topic: str, tid: str) -> None:
    producer = txn_producer(bootstrap, tid)
    for i, (outcome, n0, n1) in enumerate(PLAN):
        producer.begin_transaction()
        ck_send(producer, topic, plan_records("confluent", i, outcome, n0, n1))
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def run_kafka_python(bootstrap: str, topic: str, tid: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=5)
    try:
        producer.init_transactions()
        for i, (outcome, n0, n1) in enumerate(PLAN):
            producer.begin_transaction()
            futures = [producer.send(topic, value=v, partition=p)
                       for p, v in plan_records("kafka-python", i, outcome, n0, n1)]
            producer.flush(30)
            for f in futures:
                f.get(30)
            if outcome == "commit":
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)


def run_aiokafka(bootstrap: str, topic: str, tid: str) -> None:
    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=5)
        await producer.start()  # InitProducerId
        try:
            for i, (outcome, n0, n1) in enumerate(PLAN):
                await producer.begin_transaction()
                sent = [await producer.send(topic, value=v, partition=p)
                        for p, v in plan_records("aiokafka", i, outcome, n0, n1)]
                await asyncio.gather(*sent)
                if outcome == "commit":
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


PRODUCERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_commit_and_abort(broker, admin, client):
    topic = topic_name(f"txn-{client}")
    create_topic(broker.bootstrap, topic, 2)
    tid = topic  # unique
    PRODUCERS[client](broker.bootstrap, topic, tid)

    in_order = [(p, v) for i, (o, n0, n1) in enumerate(PLAN) if o == "commit"
                for p, v in plan_records(client, i, o, n0, n1)]
    committed = [v for _, v in in_order]
    aborted = [v for i, (o, n0, n1) in enumerate(PLAN) if o == "abort" for _, v in plan_records(client, i, o, n0, n1)]
    everything = ck_read(broker.bootstrap, topic, [0, 1], "read_uncommitted")
    assert sorted(values(everything)) == sorted(committed + aborted), "read_uncommitted sees every data record once"
    markers = marker_positions(broker.bootstrap, topic, [0, 1], everything)
    assert len(markers) == sum((n0 > 0) + (n1 > 0) for _, n0, n1 in PLAN), "one marker per transaction and partition"
    for p in (0, 1):
        lso, hwm = ck_lso(broker.bootstrap, topic, p)
        assert lso == hwm, f"partition {p}: a transaction left open (LSO {lso}, high watermark {hwm})"

    for reader, read in READERS.items():
        seen = read(broker.bootstrap, topic, [0, 1], "read_committed")
        got = values(seen)
        assert not set(got) & set(aborted), f"{reader}: aborted records read"
        assert sorted(got) == sorted(committed), f"{reader}: not every committed once"
        assert not {(s.partition, s.offset) for s in seen} & markers, f"{reader}: handed a control record"
        for p in (0, 1):  # each partition in the producer's order
            assert [s.value for s in seen if s.partition == p] == [v for q, v in in_order if q == p], reader
    assert admin.state(tid) == "CompleteCommit"


# --- 2. read_committed waits at an open transaction ----------------------------------------------
def test_read_committed_consumer_is_held_at_an_open_transaction(broker):
    topic = topic_name("txn-held")
    create_topic(broker.bootstrap, topic, 1)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    ck_send(plain, topic, [(0, b"before")])
    txn = txn_producer(broker.bootstrap, topic)
    txn.begin_transaction()
    ck_send(txn, topic, [(0, b"txn-1"), (0, b"txn-2")])
    ck_send(plain, topic, [(0, b"after")])  # another producer's, not transactional: behind the open one
    assert values(ck_read(broker.bootstrap, topic, [0], "read_uncommitted")) == [b"before", b"txn-1", b"txn-2",
                                                                                  b"after"]
    assert ck_lso(broker.bootstrap, topic) == (1, 4)

    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "held", "enable.auto.commit": False,
                            "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    seen: list[Seen] = []
    ends: list[int] = []

    def poll() -> None:
        for m in consumer.consume(100, 0.2):
            error = m.error()
            if error is None:
                seen.append(_ck_seen(m))
            else:
                assert error.code() == ck.KafkaError._PARTITION_EOF, error
                ends.append(m.offset() or 0)

    try:
        # the end of what it may read is the transaction's first offset: it has read "before" and stops there
        wait_for(lambda: poll() or ends, 30, "a read_committed end of partition")
        assert values(seen) == [b"before"] and ends == [1]
        assert values(kp_read(broker.bootstrap, topic, [0], "read_committed")) == [b"before"]
        txn.commit_transaction(30)
        wait_for(lambda: poll() or len(seen) >= 4, 30, "the committed transaction and what followed it")
        wait_for(lambda: poll() or len(ends) >= 2, 30, "the end of partition after the commit")
    finally:
        consumer.close()
    assert [(s.offset, s.value) for s in seen] == [(0, b"before"), (1, b"txn-1"), (2, b"txn-2"), (3, b"after")]
    assert ends[-1] == 5 and ck_lso(broker.bootstrap, topic) == (5, 5)  # the marker at 4 was skipped, not handed over


# --- 3. fencing ---------------------------------------------------------------------------------
def _fenced_confluent(bootstrap: str, topic: str, tid: str, opened: threading.Event, go: threading.Event) -> str:
    producer = txn_producer(bootstrap, tid)
    producer.begin_transaction()
    ck_send(producer, topic, [(0, b"first-open")])
    opened.set()
    go.wait(60)
    try:
        producer.produce(topic, value=b"first-late", partition=0)
        producer.commit_transaction(30)
        return "committed"
    except ck.KafkaException as exc:
        error = exc.args[0]
    assert isinstance(error, ck.KafkaError)
    if error.txn_requires_abort():  # what an application does next: abort, and there meet the fencing
        try:
            producer.abort_transaction(30)
            return f"aborted after {error.name()}"
        except ck.KafkaException as exc:
            error = exc.args[0]
            assert isinstance(error, ck.KafkaError)
    return error.name() if error.fatal() else f"not fatal: {error}"


def _fenced_kafka_python(bootstrap: str, topic: str, tid: str, opened: threading.Event, go: threading.Event) -> str:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=0)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"first-open", partition=0).get(30)
        opened.set()
        go.wait(60)
        try:
            producer.send(topic, value=b"first-late", partition=0)
            producer.commit_transaction()
        except kafka.errors.KafkaError as exc:
            return type(exc).__name__
        return "committed"
    finally:
        producer.close(timeout=5)


def _fenced_aiokafka(bootstrap: str, topic: str, tid: str, opened: threading.Event, go: threading.Event) -> str:
    async def run() -> str:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=0)
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(topic, value=b"first-open", partition=0)
            opened.set()
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            try:
                await producer.send_and_wait(topic, value=b"first-late", partition=0)
                await producer.commit_transaction()
            except aiokafka.errors.KafkaError as exc:
                return type(exc).__name__
            return "committed"
        finally:
            try:
                await producer.stop()
            except aiokafka.errors.KafkaError:
                pass

    return asyncio.run(asyncio.wait_for(run(), 90))


# what each client's fenced instance ends with: a fatal error saying so
FENCED = {"confluent": (_fenced_confluent, {"_FENCED", "PRODUCER_FENCED"}),
          "kafka-python": (_fenced_kafka_python, {"ProducerFencedError"}),
          "aiokafka": (_fenced_aiokafka, {"ProducerFenced"})}


@pytest.mark.parametrize("client", list(FENCED))
def test_a_second_instance_fences_the_first(broker, admin, client):
    topic = topic_name(f"txn-fence-{client}")
    create_topic(broker.bootstrap, topic, 1)
    tid = topic
    run, fenced_errors = FENCED[client]
    opened, go = threading.Event(), threading.Event()
    outcome: list[str] = []
    first = threading.Thread(target=lambda: outcome.append(run(broker.bootstrap, topic, tid, opened, go)))
    first.start()
    try:
        assert opened.wait(60), "the first instance did not open its transaction"
        before = admin.describe(tid)
        assert before.state.value == "Ongoing" and before.topic_partitions == {KpTopicPartition(topic, 0)}
        second = txn_producer(broker.bootstrap, tid)  # fences: the first's transaction is aborted first
        after = admin.describe(tid)
        assert after.producer_id == before.producer_id and after.producer_epoch > before.producer_epoch
        assert after.state.value == "Empty"
    finally:
        go.set()
        first.join(90)
    assert not first.is_alive()
    assert outcome and outcome[0] in fenced_errors, f"the first instance's next step answered {outcome}"
    second.begin_transaction()
    ck_send(second, topic, [(0, b"second")])
    second.commit_transaction(30)
    for reader in ("confluent", "kafka-python"):
        assert values(READERS[reader](broker.bootstrap, topic, [0], "read_committed")) == [b"second"], reader
    stored = values(ck_read(broker.bootstrap, topic, [0], "read_uncommitted"))
    assert b"first-open" in stored and b"first-late" not in stored, "the fenced instance wrote after its fencing"
    assert admin.state(tid) == "CompleteCommit"


# --- 4. a producer killed in a transaction: its timeout ----------------------------------------------
def start_open_transaction(bootstrap: str, topic: str, tid: str, partitions, timeout_ms: int,
                           log: Path) -> subprocess.Popen:
    """A producer process holding a transaction open (``txn_pipeline.py open``), once it is."""
    with open(log, "ab") as stderr:  # the child has its own copy
        proc = subprocess.Popen([sys.executable, str(PIPELINE), "open", bootstrap, topic, tid, "--partitions",
                                 ",".join(map(str, partitions)), "--timeout-ms", str(timeout_ms)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"the open-transaction producer said {line!r}: {log.read_text()[-2000:]}")
    return proc


def test_a_killed_producers_transaction_is_aborted_at_its_timeout(broker, admin, tmp_path):
    topic = topic_name("txn-timeout")
    create_topic(broker.bootstrap, topic, 2)
    tid = topic
    ck_send(ck.Producer({"bootstrap.servers": broker.bootstrap}), topic, [(0, b"before")])
    proc = start_open_transaction(broker.bootstrap, topic, tid, [0, 1], 3000, tmp_path / "open.log")
    try:
        described = admin.describe(tid)
        assert described.state.value == "Ongoing"
        assert described.topic_partitions == {KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)}
        assert described.transaction_timeout_ms == 3000 and described.transaction_start_time_ms > 0
        assert admin.listed(["Ongoing"]).get(tid) == "Ongoing"
        assert ck_lso(broker.bootstrap, topic, 0) == (1, 2) and ck_lso(broker.bootstrap, topic, 1) == (0, 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    # someone else's transaction after it: committed, but held behind the dead one until its timeout
    other = txn_producer(broker.bootstrap, topic + "-other")
    other.begin_transaction()
    ck_send(other, topic, [(0, b"later-0"), (1, b"later-1")])
    other.commit_transaction(30)

    wait_for(lambda: admin.state(tid) == "CompleteAbort", 15, "the timed-out transaction to be aborted")
    aborted_at = time.time() * 1000
    assert aborted_at - described.transaction_start_time_ms >= 3000, "aborted before its timeout"
    fenced = admin.describe(tid)
    assert fenced.producer_id == described.producer_id and fenced.producer_epoch == described.producer_epoch + 1
    assert fenced.topic_partitions == set()
    assert tid not in admin.listed(["Ongoing"]) and admin.listed(["CompleteAbort"]).get(tid) == "CompleteAbort"
    for p in (0, 1):
        lso, hwm = ck_lso(broker.bootstrap, topic, p)
        assert lso == hwm, f"partition {p}: the LSO stayed at {lso} (high watermark {hwm})"
    for reader in ("confluent", "kafka-python"):
        got = READERS[reader](broker.bootstrap, topic, [0, 1], "read_committed")
        assert sorted(values(got)) == [b"before", b"later-0", b"later-1"], reader
    assert {b"open-0", b"open-1"} <= set(values(ck_read(broker.bootstrap, topic, [0, 1], "read_uncommitted")))


# --- 5. broker restarts --------------------------------------------------------------------------
def restart(b, how: str) -> None:
    if how == "sigkill":
        b.kill()
    else:
        b.stop()
    b.start()


def test_outcomes_survive_broker_sigkill_and_sigterm(broker_factory):
    b = broker_factory(OVERRIDES)
    topic = topic_name("txn-restart")
    create_topic(b.bootstrap, topic, 2)
    tid = topic
    producer = txn_producer(b.bootstrap, tid)
    committed: list[bytes] = []
    for round_, how in enumerate(("sigkill", "sigterm")):
        producer.begin_transaction()
        batch = [(0, b"c%d-0" % round_), (1, b"c%d-1" % round_)]
        ck_send(producer, topic, batch)
        producer.commit_transaction(30)
        committed += [v for _, v in batch]
        producer.begin_transaction()
        ck_send(producer, topic, [(0, b"a%d-0" % round_), (1, b"a%d-1" % round_)])
        producer.abort_transaction(30)
        restart(b, how)
        admin = TxnAdmin(b.bootstrap)
        try:
            assert admin.state(tid) == "CompleteAbort", f"after {how}"
        finally:
            admin.close()
        for reader in ("confluent", "kafka-python"):
            got = READERS[reader](b.bootstrap, topic, [0, 1], "read_committed")
            assert sorted(values(got)) == sorted(committed), f"{reader} after {how}"
    # the same producer carries on after both restarts
    producer.begin_transaction()
    ck_send(producer, topic, [(0, b"last")])
    producer.commit_transaction(30)
    assert b"last" in values(ck_read(b.bootstrap, topic, [0, 1], "read_committed"))


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_open_transactions_across_a_broker_restart(broker_factory, tmp_path, how):
    """Two transactions open when the broker goes down: the producer of one is
    still there and commits it after the restart; the other's producer is
    gone, and the reloaded coordinator aborts it at its timeout."""
    b = broker_factory(OVERRIDES)
    topic = topic_name(f"txn-open-{how}")
    create_topic(b.bootstrap, topic, 2)
    live = txn_producer(b.bootstrap, topic + "-live")
    live.begin_transaction()
    ck_send(live, topic, [(0, b"live-0"), (1, b"live-1")])
    dead = start_open_transaction(b.bootstrap, topic, topic + "-dead", [0, 1], 3000, tmp_path / "dead.log")
    dead.send_signal(signal.SIGKILL)
    dead.wait(10)
    restart(b, how)
    admin = TxnAdmin(b.bootstrap)
    try:
        reloaded = admin.describe(topic + "-live")
        assert reloaded.state.value == "Ongoing"
        assert reloaded.topic_partitions == {KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)}
        assert ck_lso(b.bootstrap, topic, 0)[0] == 0, "the LSO after a restart stays at the open transaction"
        live.commit_transaction(30)
        wait_for(lambda: admin.state(topic + "-dead") == "CompleteAbort", 20, "the dead producer's transaction "
                 "to be aborted at its timeout")
        assert admin.state(topic + "-live") == "CompleteCommit"
    finally:
        admin.close()
    for p in (0, 1):
        lso, hwm = ck_lso(b.bootstrap, topic, p)
        assert lso == hwm == 4, f"partition {p}: LSO {lso}, high watermark {hwm}"  # 2 records, 2 markers
    for reader in ("confluent", "kafka-python"):
        got = READERS[reader](b.bootstrap, topic, [0, 1], "read_committed")
        assert sorted(values(got)) == [b"live-0", b"live-1"], reader


def offline_decide(b, tid: str, state: TxnState) -> None:
    """As if the coordinator had written ``state`` (PrepareCommit / PrepareAbort)
    for ``tid`` and crashed before a single marker: append it to the id's
    ``__transaction_state`` partition with the broker stopped."""
    p = txn_partition(tid)
    log = Log.open(str(b.data_dir / f"{TRANSACTION_TOPIC}-{p}"), TRANSACTION_TOPIC, p, LogConfig(),
                   clean_shutdown=True)
    try:
        current = None
        for batch in _batches(log):
            for record in batch.records:
                if record.key is not None and txn_records.decode_key(record.key) == tid and record.value is not None:
                    current = txn_records.decode_value(record.value)
        assert current is not None and current.status == TxnState.ONGOING, f"{tid} is not ongoing: {current}"
        now = int(time.time() * 1000)
        decided = txn_records.TxnLogValue(current.producer_id, current.producer_epoch, current.timeout_ms,
                                          int(state), current.partitions, now, current.start_ms)
        log.append(encode_batch([Record(0, now, txn_records.encode_key(tid), txn_records.encode_value(decided))]))
    finally:
        log.close()


def _batches(log: Log):
    offset = log.log_start_offset
    while offset < log.written_offset:
        data = log.read_records(offset, 1 << 20)
        for batch in iter_batches(data, allow_partial_tail=True):
            yield batch
            offset = batch.header.next_offset


def test_decided_transactions_are_completed_after_a_restart(broker_factory):
    """PrepareCommit / PrepareAbort written, no marker yet, then the broker
    stops: the restarted coordinator writes the markers, and the producers'
    retried EndTxn gets the answer the decision gave."""
    b = broker_factory(OVERRIDES)
    topic = topic_name("txn-decided")
    create_topic(b.bootstrap, topic, 2)
    committing = txn_producer(b.bootstrap, topic + "-commit")
    aborting = txn_producer(b.bootstrap, topic + "-abort")
    for producer, tag in ((committing, b"commit"), (aborting, b"abort")):
        producer.begin_transaction()
        ck_send(producer, topic, [(0, tag + b"-0"), (1, tag + b"-1")])
    b.stop()
    offline_decide(b, topic + "-commit", TxnState.PREPARE_COMMIT)
    offline_decide(b, topic + "-abort", TxnState.PREPARE_ABORT)
    b.start()
    admin = TxnAdmin(b.bootstrap)
    try:
        wait_for(lambda: admin.state(topic + "-commit") == "CompleteCommit"
                 and admin.state(topic + "-abort") == "CompleteAbort", 20, "the decided transactions to complete")
    finally:
        admin.close()
    committing.commit_transaction(30)  # the retry of the EndTxn the crash interrupted
    aborting.abort_transaction(30)
    for p in (0, 1):
        lso, hwm = ck_lso(b.bootstrap, topic, p)
        assert lso == hwm == 4
    for reader in ("confluent", "kafka-python"):
        got = READERS[reader](b.bootstrap, topic, [0, 1], "read_committed")
        assert sorted(values(got)) == [b"commit-0", b"commit-1"], reader
    for producer in (committing, aborting):  # and both go on
        producer.begin_transaction()
        ck_send(producer, topic, [(0, b"next")])
        producer.commit_transaction(30)
    assert values(ck_read(b.bootstrap, topic, [0], "read_committed")).count(b"next") == 2


def test_commits_racing_a_broker_sigkill(broker_factory):
    """The broker SIGKILLed while a commit is on its way (before EndTxn
    arrives, between PrepareCommit and the markers, or after): whatever the
    producer is finally told holds after the restart."""
    b = broker_factory(OVERRIDES)
    topic = topic_name("txn-racing")
    create_topic(b.bootstrap, topic, 2)
    producer = txn_producer(b.bootstrap, topic)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for round_ in range(3):
        batch = [b"r%d-0" % round_, b"r%d-1" % round_]
        producer.begin_transaction()
        ck_send(producer, topic, [(0, batch[0]), (1, batch[1])])
        told: list[BaseException | None] = []

        def commit() -> None:
            try:
                producer.commit_transaction(60)  # librdkafka retries EndTxn through the restart
                told.append(None)
            except ck.KafkaException as exc:
                told.append(exc)

        committing = threading.Thread(target=commit)
        committing.start()
        b.kill()
        b.start()
        committing.join(90)
        assert told, "commit_transaction did not return"
        error = told[0]
        if error is None:
            committed += batch
        else:  # an abortable error: the application aborts
            assert isinstance(error.args[0], ck.KafkaError) and error.args[0].txn_requires_abort(), error
            producer.abort_transaction(30)
            aborted += batch
    for reader in ("confluent", "kafka-python"):
        got = READERS[reader](b.bootstrap, topic, [0, 1], "read_committed")
        assert sorted(values(got)) == sorted(committed), f"{reader}: committed {committed}, aborted {aborted}"


# --- 6. exactly-once consume-transform-produce through kills ------------------------------------
@dataclass(frozen=True)
class Out:
    """One output record of ``txn_pipeline.py``: input number ``n`` as written by transaction ``tag``."""
    partition: int
    offset: int
    n: int
    tag: str
    count: int  # records the transaction wrote


def outputs(seen: list[Seen]) -> tuple[list[Out], list[Seen]]:
    """The pipeline's records, and whatever else was read (never anything, unless a control record leaked)."""
    found, other = [], []
    for s in seen:
        headers = dict(s.headers)
        try:
            assert s.value is not None
            found.append(Out(s.partition, s.offset, int(s.value), headers["txn"].decode(),
                             int(headers["count"])))
        except (AssertionError, KeyError, ValueError):
            other.append(s)
    return found, other


@dataclass
class History:
    """Everything observed of one pipeline run."""
    inputs: int  # the input numbers are 0 .. inputs-1
    written: list[Out]  # read_uncommitted at the end: every record in the log
    views: dict[str, list[Seen]]  # read_committed readers, each read to the end
    journal: dict[str, str]  # tag -> "committed" / "aborted", as the pipelines were answered
    lso_checks: list[tuple[int, int, int]] = field(default_factory=list)  # (partition, offset read, LSO after)


def check_history(h: History) -> dict[str, int]:
    """Counts of what exactly-once forbids, over every read_committed view:

    * ``aborted_reads``: records of aborted transactions read;
    * ``lost_writes``: records of committed transactions not read, and input
      numbers with no committed output on a partition;
    * ``duplicates``: an input number read twice from one partition (or one offset twice);
    * ``torn``: a committed transaction read in part (some partitions, some records) only;
    * ``past_lso``: a live reader handed an offset at or past the LSO it was
      then told of (the LSO never moves back, so asked right after is enough);
    * ``control_reads``: anything read that is no data record of the log (a marker).

    A transaction's outcome is the one its pipeline was answered; for one
    whose pipeline was killed before it heard, it was aborted if and only if
    another transaction wrote any of its inputs again (exactly-once
    reprocesses an input only when its offset was not committed), later in the log."""
    kinds = ("aborted_reads", "lost_writes", "duplicates", "torn", "past_lso", "control_reads")
    counts: dict[str, int] = dict.fromkeys(kinds, 0)
    by_tag: dict[str, list[Out]] = defaultdict(list)
    for r in h.written:
        by_tag[r.tag].append(r)
    inputs_of = {tag: {r.n for r in rs} for tag, rs in by_tag.items()}
    writers: dict[int, set[str]] = defaultdict(set)
    for tag, ns in inputs_of.items():
        for n in ns:
            writers[n].add(tag)
    outcome = {}
    starts = {tag: {p: min(r.offset for r in rs if r.partition == p) for p in {r.partition for r in rs}}
              for tag, rs in by_tag.items()}

    def later(other: str, tag: str) -> bool:
        return any(p in starts[other] and starts[other][p] > start for p, start in starts[tag].items())

    for tag, ns in inputs_of.items():
        if tag in h.journal:
            outcome[tag] = h.journal[tag]
        else:
            rewritten = any(later(other, tag) for n in ns for other in writers[n] - {tag})
            outcome[tag] = "aborted" if rewritten else "committed"
    stored = {(r.partition, r.offset): r for r in h.written}

    for seen in h.views.values():
        records, other = outputs(seen)
        counts["control_reads"] += len(other) + sum(stored.get((r.partition, r.offset)) != r for r in records)
        positions = Counter((r.partition, r.offset) for r in records)
        counts["duplicates"] += sum(c - 1 for c in positions.values())
        per_partition = Counter((r.partition, r.n) for r in records)
        counts["duplicates"] += sum(c - 1 for c in per_partition.values())
        read_by_tag = Counter(r.tag for r in {(r.partition, r.offset): r for r in records}.values())
        for tag, result in outcome.items():
            read = read_by_tag.get(tag, 0)
            count = by_tag[tag][0].count
            if result == "aborted":
                counts["aborted_reads"] += read
            else:
                counts["lost_writes"] += max(count - read, 0)
                counts["torn"] += 0 < read < count
        for p in (0, 1):
            counts["lost_writes"] += sum((p, n) not in per_partition for n in range(h.inputs))
    counts["past_lso"] = sum(offset >= lso for _, offset, lso in h.lso_checks)
    return counts


class LiveReader(threading.Thread):
    """A read_committed consumer reading the output while the pipeline runs and
    the broker restarts: what it reads, after each poll the LSO it is then
    told, and where it last found each partition's end."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-live",
                                     "enable.auto.commit": False, "isolation.level": "read_committed",
                                     "enable.partition.eof": True})
        self.consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
        self.seen: list[Seen] = []
        self.lso_checks: list[tuple[int, int, int]] = []
        self.ends: dict[int, int] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                read = []
                for m in self.consumer.consume(500, 0.2):
                    error = m.error()
                    if error is None:
                        read.append(_ck_seen(m))
                    elif error.code() == ck.KafkaError._PARTITION_EOF:
                        self.ends[m.partition() or 0] = m.offset() or 0
                self.seen += read
                for p in {s.partition for s in read}:
                    top = max(s.offset for s in read if s.partition == p)
                    try:
                        lso = self.consumer.get_watermark_offsets(ck.TopicPartition(self.topic, p), timeout=2)[1]
                    except ck.KafkaException:
                        continue  # the broker is down: no sample this time
                    self.lso_checks.append((p, top, lso))
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()

    def reached(self, ends: dict[int, int]) -> bool:
        return self.error is not None or all(self.ends.get(p, -1) >= end for p, end in ends.items())


class Pipeline:
    """The pipeline process of ``txn_pipeline.py``, one instance at a time;
    a dead one is replaced whenever ``ensure`` is called."""

    def __init__(self, bootstrap: str, source: str, sink: str, tmp_path: Path):
        self.args = [bootstrap, source, sink, source + "-group", source + "-txn"]
        self.journal = tmp_path / "journal.txt"
        self.log = tmp_path / "pipeline.log"
        self.proc: subprocess.Popen | None = None
        self.instances = 0

    def ensure(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            assert self.instances < 60, f"the pipeline keeps dying: {self.log.read_text()[-3000:]}"
            self.instances += 1
            with open(self.log, "ab") as stderr:  # the child has its own copy
                self.proc = subprocess.Popen([sys.executable, str(PIPELINE), "pipeline", *self.args,
                                              f"i{self.instances}", str(self.journal), "--batch", "20"],
                                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def outcomes(self) -> dict[str, str]:
        found = {}
        if self.journal.exists():
            for line in self.journal.read_text().splitlines():
                result, tag, _ = line.split()
                found[tag] = result
        return found

    def progress(self) -> int:
        """Input records whose transaction the pipelines heard committed."""
        if not self.journal.exists():
            return 0
        return sum(int(n) for result, _, n in (line.split() for line in self.journal.read_text().splitlines())
                   if result == "committed")


class OpenTransactions:
    """Whether a topic holds an open transaction's data now (its LSO short of
    its high watermark), from two long-lived consumers."""

    def __init__(self, bootstrap: str, topic: str, partitions):
        self.tps = [ck.TopicPartition(topic, p) for p in partitions]
        self.consumers = [ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-open", "isolation.level": i})
                          for i in ("read_committed", "read_uncommitted")]

    def __call__(self) -> bool:
        committed, uncommitted = self.consumers
        try:
            return any(committed.get_watermark_offsets(tp, timeout=2)[1] < uncommitted.get_watermark_offsets(
                tp, timeout=2)[1] for tp in self.tps)
        except ck.KafkaException:
            return False

    def close(self) -> None:
        for c in self.consumers:
            c.close()


# each fault at a random point of the run, in order, and when: "in-txn" while the pipeline's transaction
# has data written (not yet committed), "between" right after one committed, "any" wherever it lands
FAULTS = [("kill-pipeline", "in-txn"), ("kill-broker", "in-txn"), ("kill-pipeline", "between"),
          ("stop-broker", "in-txn"), ("kill-pipeline", "in-txn"), ("kill-broker", "any"), ("kill-pipeline", "any")]


def test_exactly_once_pipeline_through_kills(broker_factory, tmp_path):
    seed = int(os.environ.get("TXN_PIPELINE_SEED") or random.randrange(1 << 30))  # set it to replay a run
    rng = random.Random(seed)
    b = broker_factory(OVERRIDES)
    source, sink = topic_name("eos-in"), topic_name("eos-out")
    create_topic(b.bootstrap, source, 2)
    create_topic(b.bootstrap, sink, 2)
    n = 1200
    feeder = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    ck_send(feeder, source, [(i % 2, b"%d" % i) for i in range(n)])
    ends = {p: ck_lso(b.bootstrap, source, p)[1] for p in (0, 1)}
    assert ends == {0: n // 2, 1: n // 2}

    pipeline = Pipeline(b.bootstrap, source, sink, tmp_path)
    live = LiveReader(b.bootstrap, sink)
    live.start()
    offsets = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": source + "-group"})
    open_txn = OpenTransactions(b.bootstrap, sink, (0, 1))

    def caught_up() -> bool:
        try:
            committed = offsets.committed([ck.TopicPartition(source, p) for p in (0, 1)], timeout=2)
        except ck.KafkaException:
            return False
        return all(tp.offset == ends[tp.partition] for tp in committed)

    points = sorted(rng.sample(range(n // 20, n * 9 // 10), len(FAULTS)))
    done: list[tuple[str, str, int]] = []
    try:
        pipeline.ensure()
        for (fault, when), point in zip(FAULTS, points):
            wait_for(lambda: pipeline.ensure() or pipeline.progress() >= point, 60,
                     f"the pipeline to pass {point} inputs before {fault} (seed {seed})")
            if when == "in-txn":
                try:
                    wait_for(lambda: pipeline.ensure() or open_txn(), 10, "a transaction with data", interval=0.002)
                except TimeoutError:
                    when = "missed"  # it went on without
            done.append((fault, when, pipeline.progress()))
            if fault == "kill-pipeline":
                pipeline.kill()
            else:
                restart(b, "sigkill" if fault == "kill-broker" else "sigterm")
        wait_for(lambda: pipeline.ensure() or caught_up(), 90, f"the pipeline to commit every input (seed {seed})")
    finally:
        pipeline.kill()
        offsets.close()
        open_txn.close()
    assert all(progress < n for _, _, progress in done), f"the faults came after the work was done: {done}"

    final_ends = {p: ck_lso(b.bootstrap, sink, p) for p in (0, 1)}
    assert all(lso == hwm for lso, hwm in final_ends.values()), f"a transaction left open: {final_ends}"
    try:
        wait_for(lambda: live.reached({p: hwm for p, (_, hwm) in final_ends.items()}), 30,
                 "the live reader to reach the end")
    finally:
        live.stop.set()
        live.join(30)
    assert live.error is None, f"the live reader failed: {live.error!r}"
    written, other = outputs(ck_read(b.bootstrap, sink, [0, 1], "read_uncommitted"))
    assert not other, f"records in the output that the pipeline did not write: {other[:3]}"
    history = History(n, written, {"live": live.seen,
                                   "confluent": ck_read(b.bootstrap, sink, [0, 1], "read_committed"),
                                   "kafka-python": kp_read(b.bootstrap, sink, [0, 1], "read_committed")},
                      pipeline.outcomes(), live.lso_checks)
    counts = check_history(history)
    assert counts == dict.fromkeys(counts, 0), (f"exactly-once broken (seed {seed}, faults {done}, "
                                                f"{pipeline.instances} pipeline instances): {counts}")
    assert len(live.lso_checks) > 0
    aborted = sum(1 for r in history.journal.values() if r == "aborted")
    print(f"seed {seed}: {pipeline.instances} instances, faults {done}, {len(written)} written, "
          f"{len(history.journal)} journaled ({aborted} aborted)")


def test_check_history_counts_each_kind_of_violation():
    """The checker itself, on a hand-made history with one of each."""
    def out(p, o, n, tag, count=2):
        return Out(p, o, n, tag, count)

    def seen(r: Out) -> Seen:
        return Seen(r.partition, r.offset, b"%d" % r.n, (("txn", r.tag.encode()), ("count", b"%d" % r.count)))

    # inputs 0..2; t1 (0) committed, t2 (1) aborted and redone as t3, t4 (2) committed
    written = [out(0, 0, 0, "t1"), out(1, 0, 0, "t1"), out(0, 1, 1, "t2"), out(1, 1, 1, "t2"),
               out(0, 3, 1, "t3"), out(1, 3, 1, "t3"), out(0, 5, 2, "t4"), out(1, 5, 2, "t4")]
    good = [seen(r) for r in written if r.tag != "t2"]
    clean = History(3, written, {"ok": good}, {"t1": "committed", "t2": "aborted", "t4": "committed"})
    assert check_history(clean) == dict.fromkeys(check_history(clean), 0)  # t3, unheard of, counts as committed
    bad = [seen(written[0]), seen(written[0]), seen(written[2]), seen(written[4]), seen(written[5]),
           seen(written[6]), Seen(0, 2, b"\x00\x00\x00\x00\x00\x00", ())]  # t4 torn; a marker read
    history = History(3, written, {"bad": bad}, {"t1": "committed", "t2": "aborted", "t4": "committed"},
                      [(0, 5, 5), (1, 3, 6)])
    # t1 read twice at one offset, never on partition 1; t2's aborted record read (input 1 a second time on
    # partition 0); t4 read on partition 0 only; input 0 and 2 missing on partition 1; one offset 5 at LSO 5
    assert check_history(history) == {"aborted_reads": 1, "lost_writes": 4, "duplicates": 3, "torn": 2,
                                      "past_lso": 1, "control_reads": 1}


# --- 7. KIP-890: a produce outside the transaction ------------------------------------------------
def raw_produce(port: int, topic: str, partition: int, records: bytes, tid: str | None) -> int:
    """Produce v3 (acks=-1) of one batch on a fresh connection; the partition's error code."""
    name = topic.encode()
    tid_field = struct.pack(">h", -1) if tid is None else struct.pack(">h", len(tid)) + tid.encode()
    body = (struct.pack(">hhih", 0, 3, 77, 3) + b"raw" + tid_field + struct.pack(">hi", -1, 30000)
            + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + struct.pack(">ii", partition, len(records)) + records)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        answer = s.recv(size, socket.MSG_WAITALL)
    correlation, topics, name_len = struct.unpack_from(">iih", answer)
    answered, error = struct.unpack_from(">ih", answer, 4 + 4 + 2 + name_len + 4)
    assert (correlation, topics, answered) == (77, 1, partition)
    return error


def test_kip890_a_produce_outside_the_transaction_is_refused(broker, admin):
    topic = topic_name("txn-kip890")
    create_topic(broker.bootstrap, topic, 2)
    tid = topic
    producer = txn_producer(broker.bootstrap, tid)
    producer.begin_transaction()
    ck_send(producer, topic, [(0, b"in-txn")])  # partition 0 is in the transaction, 1 never was
    d = admin.describe(tid)
    assert d.state.value == "Ongoing" and d.topic_partitions == {KpTopicPartition(topic, 0)}

    def batch(value: bytes, sequence: int, transactional: bool = True) -> bytes:
        return encode_batch([Record(0, int(time.time() * 1000), None, value)], producer_id=d.producer_id,
                            producer_epoch=d.producer_epoch, base_sequence=sequence, transactional=transactional)

    # a transactional batch to a partition never added to the transaction
    assert raw_produce(broker.port, topic, 1, batch(b"sneaked", 0), tid) == INVALID_TXN_STATE
    # the same without a transactional id in the request: refused before any partition, as Kafka does
    assert raw_produce(broker.port, topic, 1, batch(b"sneaked", 0), None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # a plain (idempotent) batch of the producer while its transaction is open on the partition
    assert raw_produce(broker.port, topic, 0, batch(b"plain", 1, transactional=False), tid) == INVALID_TXN_STATE
    assert ck_lso(broker.bootstrap, topic, 1) == (0, 0) and ck_lso(broker.bootstrap, topic, 0) == (0, 1)

    producer.commit_transaction(30)
    # after the commit, partition 0 is no longer in a transaction either: a late write cannot open one
    assert raw_produce(broker.port, topic, 0, batch(b"late", 1), tid) == INVALID_TXN_STATE
    assert ck_lso(broker.bootstrap, topic, 0) == (2, 2) and ck_lso(broker.bootstrap, topic, 1) == (0, 0)
    assert values(ck_read(broker.bootstrap, topic, [0, 1], "read_uncommitted")) == [b"in-txn"]
    assert admin.state(tid) == "CompleteCommit"  # the producer's own transaction was not disturbed
