"""The transaction coordinator through the APIs a transactional producer and
the admin tools send (KIP-98, KIP-360, KIP-447, KIP-588, KIP-890 part 1):
FindCoordinator (key type 1), InitProducerId, AddPartitionsToTxn,
transactional Produce, EndTxn and its markers, AddOffsetsToTxn and
TxnOffsetCommit with OffsetFetch's require_stable, fencing, timeouts, id
expiry, DescribeTransactions, ListTransactions, and a coordinator replaying
``__transaction_state`` on a restart.

``TxnBroker`` is the shared harness (``conftest.Harness``) with a transaction
coordinator of its own, wired as ``Worker`` wires one standalone (its
handlers on the local owner, ``ctx.transactions``, owners and producer ids,
the markers on ``__consumer_offsets`` settling the group coordinator's
pending offsets), over a small ``__transaction_state``; it can be made
without starting the coordinator, so a test sees it before it has loaded."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from hpbroker.clock import now_ms
from hpbroker.errors import ErrorCode
from hpbroker.protocol import client_codec
from hpbroker.protocol.codec import decode_request, encode_response
from hpbroker.records import Record, encode_batch, iter_batches
from hpbroker.records.control import parse_control_record
from hpbroker.server.ownership import OFFSETS_TOPIC, TRANSACTION_TOPIC, group_partition, txn_partition
from hpbroker.storage import Log
from hpbroker.varint import decode_uvarint
from hpbroker.workers import state_partitions
from hpbroker.workers.handlers import ROUTES
from hpbroker.workers.owner_calls import AddTxnPartitions, AppendResult, TxnOffsetCommit, WriteMarker
from hpbroker.workers.transactions import (
    TransactionCoordinator,
    coordinator as coordinator_module,
    records as txn_records,
)
from hpbroker.workers.transactions.state import MAX_EPOCH, TxnState
from tests.handlers.conftest import (
    CLIENT_ID,
    DELETE_TOPICS,
    FIND_COORDINATOR,
    HOST,
    INIT_PRODUCER_ID,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSETS_PARTITIONS,
    PORT,
    PRODUCE_KEY,
    Harness,
    error_name,
    errors,
    fetch_request,
    request,
)

ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT, DESCRIBE_TXNS, LIST_TXNS = 24, 25, 26, 28, 65, 66
TXN_PARTITIONS = 3  # a small __transaction_state
TRANSACTION = 1  # FindCoordinator's key type
TIMEOUT_MS = 60_000


class TxnBroker(Harness):
    """The harness's standalone worker with a transaction coordinator of its own, wired as
    ``Worker`` wires it; ``start=False`` leaves it to the test to start (and so to load)."""

    def __init__(self, log_dir: str, overrides: Mapping | None = None, *, start: bool = True):
        super().__init__(log_dir, {"transaction.state.log.num.partitions": TXN_PARTITIONS, **(overrides or {})})
        wired = getattr(self, "transactions", None)
        if isinstance(wired, TransactionCoordinator):
            wired.close()  # one the harness may have wired already: this one replaces it
        self.transactions = TransactionCoordinator(self.partitions, self.topics, self.config, 0, 1)
        self.local_owner.handlers.update(self.transactions.handlers())
        self.ctx.owners.txn_partitions = self.config["transaction.state.log.num.partitions"]
        self.ctx.transactions = self.transactions
        self.transactions.attach(self.ctx.owners, self.ctx.producer_ids)
        self.partitions.on_marker = self.marker_written
        if start:
            self.run(self.coordinator_started())

    async def coordinator_started(self) -> None:
        self.transactions.start()  # replays what __transaction_state holds; arms the timeout check

    def marker_written(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        if topic == OFFSETS_TOPIC:
            self.groups.transaction_ended(partition, producer_id, commit)

    def settle(self, condition: Callable[[], bool], what: str = "the condition", timeout_s: float = 5.0) -> None:
        """Run the loop (the coordinator's background work: markers, fencing, loading) until ``condition()``."""
        async def wait() -> None:
            deadline = time.monotonic() + timeout_s
            while not condition():
                if time.monotonic() > deadline:
                    raise AssertionError(f"{what} never came about")
                await asyncio.sleep(0.001)
        self.run(wait())

    def abort_timed_out(self, now: int) -> int:
        """The coordinator's periodic check, as its timer runs it on the loop, at time ``now``."""
        async def check() -> int:
            return self.transactions.abort_timed_out(now)
        return self.run(check())

    def state(self, tid: str) -> TxnState | None:
        md = self.transactions.txns.get(tid)
        return None if md is None else md.state

    def close(self) -> None:
        self.transactions.close()
        super().close()


class TxnBrokers:
    """``make_txn_broker(log_dir=None, overrides=None)``: a broker with a transaction
    coordinator, over a fresh log dir or (a restart) one a closed broker used."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.made: list[TxnBroker] = []
        self.closed: list[TxnBroker] = []

    def __call__(self, log_dir: str | None = None, overrides: Mapping | None = None, *,
                 start: bool = True) -> TxnBroker:
        if log_dir is None:
            path = self.tmp_path / f"logs{len(self.made)}"
            path.mkdir()
            log_dir = str(path)
        broker = TxnBroker(log_dir, overrides, start=start)
        self.made.append(broker)
        return broker

    def close(self, broker: TxnBroker) -> None:
        """A clean stop, as before a restart over the same log dir."""
        broker.close()
        self.closed.append(broker)

    def close_all(self) -> None:
        for broker in self.made:
            if not any(broker is c for c in self.closed):
                broker.close()


@pytest.fixture
def make_txn_broker(tmp_path):
    brokers = TxnBrokers(tmp_path)
    yield brokers
    brokers.close_all()


@pytest.fixture
def broker(make_txn_broker) -> TxnBroker:
    """A coordinator found (``__transaction_state`` made, as FindCoordinator does) and a topic "t" of two partitions."""
    broker = make_txn_broker()
    broker.create_topic("t", 2)
    assert find(broker, 3, "tx").error_code == ErrorCode.none
    return broker


# --- requests ---------------------------------------------------------------------------------
def find(broker: Harness, version: int, *keys: str):
    """FindCoordinator for transactional ids: v0-v3 the answer itself, v4+ the coordinators."""
    answer = broker.send(request(FIND_COORDINATOR, version, key=keys[0], coordinator_keys=keys, key_type=TRANSACTION))
    return answer.coordinators if version >= 4 else answer


def init_producer_id(broker: Harness, tid: str | None, version: int = 4, *, timeout_ms: int = TIMEOUT_MS,
                     producer_id: int = -1, producer_epoch: int = -1):
    return broker.send(request(INIT_PRODUCER_ID, version, transactional_id=tid, transaction_timeout=timeout_ms,
                               producer_id=producer_id, producer_epoch=producer_epoch))


def add_partitions(broker: Harness, tid: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]],
                   version: int = 3) -> dict[tuple[str, int], str]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    answer = broker.send(request(ADD_PARTITIONS, version, v3_and_below_transactional_id=tid,
                                 v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                                 v3_and_below_topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()]))
    return {(t.name, p.partition_index): error_name(p.partition_error_code)
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def records(*values: bytes, producer_id: int, epoch: int, sequence: int, transactional: bool = True) -> bytes:
    ts = now_ms()  # current timestamps: the coordinator's markers do not roll the segment over them
    return encode_batch([Record(i, ts, None, v) for i, v in enumerate(values)], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, transactional=transactional)


def produce(broker: Harness, tid: str | None, batches: Mapping[tuple[str, int], bytes], version: int = 9):
    """One Produce request of ``batches`` ((topic, partition) -> records); each partition's answer."""
    by_topic: dict[str, list] = {}
    for (topic, partition), data in batches.items():
        by_topic.setdefault(topic, []).append({"index": partition, "records": data})
    answer = broker.send(request(PRODUCE_KEY, version, transactional_id=tid, acks=-1, timeout=5000,
                                 topic_data=[{"name": t, "partition_data": ps} for t, ps in by_topic.items()]))
    return {(t.name, p.index): p for t in answer.responses for p in t.partition_responses}


def end_txn(broker: Harness, tid: str, producer_id: int, epoch: int, commit: bool, version: int = 3) -> str:
    answer = broker.send(request(END_TXN, version, transactional_id=tid, producer_id=producer_id,
                                 producer_epoch=epoch, committed=commit))
    return error_name(answer.error_code)


def add_offsets(broker: Harness, tid: str, producer_id: int, epoch: int, group: str, version: int = 3) -> str:
    answer = broker.send(request(ADD_OFFSETS, version, transactional_id=tid, producer_id=producer_id,
                                 producer_epoch=epoch, group_id=group))
    return error_name(answer.error_code)


def txn_offset_commit(broker: Harness, tid: str, group: str, producer_id: int, epoch: int,
                      offsets: Mapping[tuple[str, int], int], version: int = 3) -> dict[tuple[str, int], str]:
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": "m"})
    answer = broker.send(request(TXN_OFFSET_COMMIT, version, transactional_id=tid, group_id=group,
                                 producer_id=producer_id, producer_epoch=epoch, generation_id=-1, member_id="",
                                 group_instance_id=None,
                                 topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()]))
    return {(t.name, p.partition_index): error_name(p.error_code) for t in answer.topics for p in t.partitions}


def committed_offsets(broker: Harness, group: str, partitions: Iterable[tuple[str, int]], *,
                      require_stable: bool, version: int = 7) -> dict[tuple[str, int], tuple[int, str]]:
    """OffsetFetch (v7: one group; v8: batched); (topic, partition) -> (offset, error name)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    answer = broker.send(request(OFFSET_FETCH, version, group_id=group, topics=topics, require_stable=require_stable,
                                 groups=[{"group_id": group, "topics": topics}]))
    found = answer.groups[0].topics if version >= 8 else answer.topics
    return {(t.name, p.partition_index): (p.committed_offset, error_name(p.error_code))
            for t in found for p in t.partitions}


def list_transactions(broker: Harness, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                      version: int = 1, duration_ms: int = -1):
    return broker.send(request(LIST_TXNS, version, state_filters=list(states), producer_id_filters=list(producer_ids),
                               duration_filter=duration_ms))


def listed(answer) -> list[tuple[str, int, str]]:
    return [(t.transactional_id, t.producer_id, t.transaction_state) for t in answer.transaction_states]


# DescribeTransactions is read off the wire by hand: an Empty transaction's
# start time is -1 (as in Kafka), which kio's client decoder refuses to read
@dataclass
class Described:
    error: str
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]] = field(default_factory=list)


class _Wire:
    def __init__(self, data: bytes, pos: int):
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        value, self.pos = decode_uvarint(self.data, self.pos)
        return value

    def string(self) -> str:
        size = self.uvarint() - 1
        text = self.data[self.pos:self.pos + size].decode()
        self.pos += size
        return text

    def no_tags(self) -> None:
        assert self.uvarint() == 0


def describe(broker: Harness, *tids: str) -> list[Described]:
    req = request(DESCRIBE_TXNS, 0, transactional_ids=list(tids))
    header, decoded = decode_request(client_codec.encode_request(req, 7, CLIENT_ID)[4:])
    wire = encode_response(header, broker.run(ROUTES[DESCRIBE_TXNS](broker.ctx, header, decoded)))
    r = _Wire(wire, 4)
    assert r.fixed(">i") == 7
    r.no_tags()  # the response header (v1)
    r.fixed(">i")  # throttle time
    found = []
    for _ in range(r.uvarint() - 1):
        d = Described(error_name(r.fixed(">h")), r.string(), r.string(), r.fixed(">i"), r.fixed(">q"),
                      r.fixed(">q"), r.fixed(">h"))
        for _ in range(r.uvarint() - 1):
            topic = r.string()
            d.partitions += [(topic, r.fixed(">i")) for _ in range(r.uvarint() - 1)]
            r.no_tags()
        r.no_tags()
        found.append(d)
    r.no_tags()
    assert r.pos == len(wire)
    return found


# --- reading what was written -----------------------------------------------------------------------------
def log_of(broker: Harness, topic: str, partition: int) -> Log:
    found = broker.partitions.log_of(topic, partition)
    assert found is not None, f"{topic}-{partition} has no log"
    return found


def batches_of(broker: Harness, topic: str, partition: int = 0) -> list:
    """Every batch of the partition's log (every segment)."""
    log = log_of(broker, topic, partition)
    out: list = []
    offset = log.log_start_offset
    while offset < log.written_offset:
        found = list(iter_batches(log.read_records(offset, 1 << 20)))
        assert found, f"nothing read at {offset}"
        out += found
        offset = found[-1].header.next_offset
    return out


def markers_of(broker: Harness, topic: str, partition: int = 0) -> list[tuple[int, int, int, str]]:
    """(offset, producer id, epoch, COMMIT/ABORT) of each marker in the partition."""
    return [(b.header.base_offset, b.header.producer_id, b.header.producer_epoch,
             "COMMIT" if parse_control_record(b.records[0]).is_commit else "ABORT")
            for b in batches_of(broker, topic, partition) if b.header.is_control]


def data_of(broker: Harness, topic: str, partition: int = 0) -> list[bytes | None]:
    return [r.value for b in batches_of(broker, topic, partition) if not b.header.is_control for r in b.records]


def read_committed(broker: Harness, topic: str, partition: int = 0):
    """A read_committed Fetch of the partition from 0: (last stable offset, high watermark, aborted
    [(producer id, first offset)], the values of its data batches)."""
    answer = broker.send(fetch_request(12, [(topic, partition, 0)], isolation_level=1))
    [p] = [p for t in answer.responses for p in t.partitions]
    assert p.error_code == ErrorCode.none
    values = [r.value for b in iter_batches(p.records or b"") if not b.header.is_control for r in b.records]
    return (p.last_stable_offset, p.high_watermark, [(a.producer_id, a.first_offset) for a in p.aborted_transactions],
            values)


class Producer:
    """A transactional producer's view: its id, epoch and each partition's next sequence."""

    def __init__(self, broker: TxnBroker, tid: str, timeout_ms: int = TIMEOUT_MS):
        self.broker, self.tid, self.timeout_ms = broker, tid, timeout_ms
        self.producer_id, self.epoch = -1, -1
        self.sequences: dict[tuple[str, int], int] = {}

    def init(self, version: int = 4, *, kip360: bool = False) -> str:
        """InitProducerId as a new instance, or (``kip360``) naming the id and epoch it has."""
        answer = init_producer_id(self.broker, self.tid, version, timeout_ms=self.timeout_ms,
                                  producer_id=self.producer_id if kip360 else -1,
                                  producer_epoch=self.epoch if kip360 else -1)
        if answer.error_code == ErrorCode.none:
            self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
            self.sequences.clear()
        return error_name(answer.error_code)

    def add(self, *partitions: tuple[str, int], version: int = 3) -> dict[tuple[str, int], str]:
        return add_partitions(self.broker, self.tid, self.producer_id, self.epoch, partitions, version)

    def send(self, *rows: tuple[str, int, list[bytes]], tid: str | None = "") -> dict[tuple[str, int], str]:
        """One Produce of ``(topic, partition, values)`` each (transactional batches); error names."""
        batches = {(t, p): records(*values, producer_id=self.producer_id, epoch=self.epoch,
                                   sequence=self.sequences.get((t, p), 0)) for t, p, values in rows}
        answers = produce(self.broker, self.tid if tid == "" else tid, batches)
        for t, p, values in rows:
            if answers[(t, p)].error_code == ErrorCode.none:
                self.sequences[(t, p)] = self.sequences.get((t, p), 0) + len(values)
        return {tp: error_name(a.error_code) for tp, a in answers.items()}

    def end(self, commit: bool, version: int = 3) -> str:
        return end_txn(self.broker, self.tid, self.producer_id, self.epoch, commit, version)


def ongoing(broker: TxnBroker, tid: str, *partitions: tuple[str, int]) -> Producer:
    """A producer with a transaction open on ``partitions``, one record written to each."""
    producer = Producer(broker, tid)
    assert producer.init() == "none"
    assert set(producer.add(*partitions).values()) == {"none"}
    assert set(producer.send(*((t, p, [f"{tid}-{t}{p}".encode()]) for t, p in partitions)).values()) == {"none"}
    return producer


# --- FindCoordinator --------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2, 3])  # v0 has no key type: its key is a group's
def test_a_transactional_ids_coordinator_is_this_broker(make_txn_broker, version):
    broker = make_txn_broker()
    assert broker.topics.get(TRANSACTION_TOPIC) is None
    found = find(broker, version, "tx-1")
    assert (found.error_code, found.node_id, found.host, found.port) == (ErrorCode.none, 0, HOST, PORT)
    state = broker.topics.get(TRANSACTION_TOPIC)
    assert state is not None and state.partitions == TXN_PARTITIONS
    assert state.configs["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", [4, 6])
def test_batched_transactional_ids(make_txn_broker, version):
    broker = make_txn_broker()
    found = find(broker, version, "tx-1", "tx-2", "")
    assert [f.key for f in found] == ["tx-1", "tx-2", ""]
    assert errors(found) == ["none", "none", "invalid_request"]
    assert [(f.node_id, f.host, f.port) for f in found[:2]] == [(0, HOST, PORT)] * 2
    assert found[2].node_id == -1


def test_before_the_state_topic_exists_the_coordinator_is_not_available(make_txn_broker):
    broker = make_txn_broker()
    answer = init_producer_id(broker, "tx")
    assert (answer.error_code, answer.producer_id) == (ErrorCode.coordinator_not_available, -1)
    find(broker, 3, "tx")
    assert init_producer_id(broker, "tx").error_code == ErrorCode.none


# --- InitProducerId ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 4])
def test_init_gives_an_id_and_bumps_its_epoch_each_time(broker, version):
    first = init_producer_id(broker, "tx", version)
    assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0) and first.producer_id >= 0
    other = init_producer_id(broker, "other", version)
    assert other.producer_id != first.producer_id
    again = init_producer_id(broker, "tx", version)  # a new instance of the producer
    assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.none, first.producer_id, 1)
    assert [(d.state, d.producer_epoch, d.partitions) for d in describe(broker, "tx")] == [("Empty", 1, [])]


def test_kip360_a_bump_by_the_current_producer_and_its_retry(broker):
    first = init_producer_id(broker, "tx")
    pid = first.producer_id
    bumped = init_producer_id(broker, "tx", producer_id=pid, producer_epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, pid, 1)
    # the answer was lost; the retry names the epoch it had: the same answer, no second bump
    retried = init_producer_id(broker, "tx", producer_id=pid, producer_epoch=0)
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (ErrorCode.none, pid, 1)
    assert describe(broker, "tx")[0].producer_epoch == 1
    # the current epoch bumps again
    assert init_producer_id(broker, "tx", producer_id=pid, producer_epoch=1).producer_epoch == 2


@pytest.mark.parametrize("version,error", [(3, ErrorCode.invalid_producer_epoch), (4, ErrorCode.producer_fenced)])
def test_kip360_an_older_instance_is_fenced(broker, version, error):
    pid = init_producer_id(broker, "tx").producer_id
    init_producer_id(broker, "tx")  # epoch 1
    init_producer_id(broker, "tx")  # epoch 2: epoch 0 is neither current nor the one before
    stale = init_producer_id(broker, "tx", version, producer_id=pid, producer_epoch=0)
    assert (stale.error_code, stale.producer_id, stale.producer_epoch) == (error, -1, -1)
    other_id = init_producer_id(broker, "tx", version, producer_id=pid + 1000, producer_epoch=2)
    assert other_id.error_code == error
    assert describe(broker, "tx")[0].producer_epoch == 2


@pytest.mark.parametrize("timeout_ms", [0, -5, 1002])
def test_a_timeout_out_of_range_is_refused(make_txn_broker, timeout_ms):
    broker = make_txn_broker(overrides={"transaction.max.timeout.ms": 1000})
    find(broker, 3, "tx")
    answer = init_producer_id(broker, "tx", timeout_ms=timeout_ms)
    assert (answer.error_code, answer.producer_id) == (ErrorCode.invalid_transaction_timeout, -1)
    assert describe(broker, "tx")[0].error == "transactional_id_not_found"
    assert init_producer_id(broker, "tx", timeout_ms=1000).error_code == ErrorCode.none


@pytest.mark.parametrize("timeout_ms", [1001, 2002])
def test_the_transaction_timeout_is_kept_to_the_millisecond(make_txn_broker, timeout_ms):
    broker = make_txn_broker(overrides={"transaction.max.timeout.ms": 1000})
    find(broker, 3, "tx")
    assert init_producer_id(broker, "tx", timeout_ms=timeout_ms).error_code == ErrorCode.invalid_transaction_timeout
    broker.transactions.max_timeout_ms = 900_000
    assert init_producer_id(broker, "tx", timeout_ms=timeout_ms).error_code == ErrorCode.none
    assert describe(broker, "tx")[0].timeout_ms == timeout_ms


def test_an_empty_transactional_id_is_an_invalid_request(broker):
    assert init_producer_id(broker, "").error_code == ErrorCode.invalid_request


def test_an_exhausted_epoch_gets_a_new_producer_id(broker):
    producer = Producer(broker, "tx")
    producer.init()
    md = broker.transactions.txns["tx"]
    broker.transactions.txns["tx"] = md.moved(producer_epoch=MAX_EPOCH - 1)  # as after 32766 restarts
    assert producer.init() == "none"
    assert producer.producer_id != md.producer_id and producer.epoch == 0


def test_a_retry_of_the_call_that_exhausted_the_epoch_gets_the_same_answer(broker):
    """KIP-360: the answer giving a new producer id was lost; the producer asks
    again naming the id and exhausted epoch it had, and gets the same id back."""
    producer = Producer(broker, "tx")
    producer.init()
    md = broker.transactions.txns["tx"]
    broker.transactions.txns["tx"] = md.moved(producer_epoch=MAX_EPOCH - 1)
    first, retry = (init_producer_id(broker, "tx", producer_id=md.producer_id, producer_epoch=MAX_EPOCH - 1)
                    for _ in range(2))
    assert (first.error_code, retry.error_code) == (ErrorCode.none, ErrorCode.none)
    assert first.producer_id != md.producer_id and first.producer_epoch == 0
    assert (retry.producer_id, retry.producer_epoch) == (first.producer_id, first.producer_epoch)
    # the old id with an epoch that was not exhausted is some other, older instance
    stale = init_producer_id(broker, "tx", producer_id=md.producer_id, producer_epoch=5)
    assert stale.error_code == ErrorCode.producer_fenced


# --- AddPartitionsToTxn ----------------------------------------------------------------------------------
def test_partitions_join_the_transaction(broker):
    broker.create_topic("u", 3)
    producer = Producer(broker, "tx")
    producer.init()
    assert producer.add(("t", 0), ("u", 2)) == {("t", 0): "none", ("u", 2): "none"}
    assert producer.add(("t", 1), ("t", 0)) == {("t", 1): "none", ("t", 0): "none"}  # more, and one again
    [d] = describe(broker, "tx")
    assert (d.state, sorted(d.partitions)) == ("Ongoing", [("t", 0), ("t", 1), ("u", 2)])
    assert 0 <= now_ms() - d.start_ms < 60_000


def test_an_unknown_topic_fails_the_whole_request(broker):
    producer = Producer(broker, "tx")
    producer.init()
    assert producer.add(("t", 0), ("missing", 0), ("t", 7)) == {
        ("t", 0): "operation_not_attempted", ("missing", 0): "unknown_topic_or_partition",
        ("t", 7): "unknown_topic_or_partition"}
    assert (describe(broker, "tx")[0].state, broker.state("tx")) == ("Empty", TxnState.EMPTY)


def test_a_producer_id_not_the_transactional_ids_is_refused(broker):
    producer = Producer(broker, "tx")
    producer.init()
    assert add_partitions(broker, "tx", producer.producer_id + 1, 0, [("t", 0)]) == {
        ("t", 0): "invalid_producer_id_mapping"}
    assert add_partitions(broker, "unknown-tx", producer.producer_id, 0, [("t", 0)]) == {
        ("t", 0): "invalid_producer_id_mapping"}


@pytest.mark.parametrize("version,error", [(0, "invalid_producer_epoch"), (1, "invalid_producer_epoch"),
                                           (2, "producer_fenced"), (3, "producer_fenced")])
def test_an_older_epoch_is_fenced(broker, version, error):
    old = Producer(broker, "tx")
    old.init()
    Producer(broker, "tx").init()  # a new instance: epoch 1
    assert old.add(("t", 0), ("t", 1), version=version) == {("t", 0): error, ("t", 1): error}
    assert broker.state("tx") is TxnState.EMPTY


# --- Produce (KIP-890 part 1) ---------------------------------------------------------------------------
def test_a_transactional_produce_to_an_added_partition_is_appended(broker):
    producer = Producer(broker, "tx")
    producer.init()
    producer.add(("t", 0))
    assert producer.send(("t", 0, [b"a", b"b"])) == {("t", 0): "none"}
    assert producer.send(("t", 0, [b"c"])) == {("t", 0): "none"}  # its transaction is open there now
    assert data_of(broker, "t") == [b"a", b"b", b"c"]
    assert read_committed(broker, "t")[:3] == (0, 3, [])  # nothing readable until it ends


def test_a_transactional_produce_to_a_partition_not_added_is_refused_and_not_stored(broker):
    producer = Producer(broker, "tx")
    producer.init()
    producer.add(("t", 0))
    assert producer.send(("t", 0, [b"in"]), ("t", 1, [b"out"])) == {("t", 0): "none", ("t", 1): "invalid_txn_state"}
    assert data_of(broker, "t", 0) == [b"in"]
    assert log_of(broker, "t", 1).log_end_offset == 0
    # nothing is open either before AddPartitionsToTxn or after the transaction ended
    other = Producer(broker, "other")
    other.init()
    assert other.send(("t", 1, [b"x"])) == {("t", 1): "invalid_txn_state"}
    assert producer.end(commit=True) == "none"
    assert producer.send(("t", 0, [b"late"])) == {("t", 0): "invalid_txn_state"}
    assert data_of(broker, "t", 0) == [b"in"] and log_of(broker, "t", 1).log_end_offset == 0


def test_a_fenced_producers_transactional_produce_is_refused_invalid_producer_epoch(broker):
    """As Kafka's AddPartitionsToTxnManager: the coordinator's PRODUCER_FENCED is answered
    INVALID_PRODUCER_EPOCH, the error producers expect from Produce."""
    old = ongoing(broker, "tx", ("t", 0))
    assert old.end(commit=True) == "none"
    Producer(broker, "tx").init()  # a new instance fences the old
    assert old.send(("t", 0, [b"zombie"])) == {("t", 0): "invalid_producer_epoch"}
    assert data_of(broker, "t") == [b"tx-t0"]


def test_transactional_batches_without_a_transactional_id_are_refused(broker):
    producer = ongoing(broker, "tx", ("t", 0))
    assert producer.send(("t", 0, [b"anonymous"]), tid=None) == {("t", 0): "transactional_id_authorization_failed"}
    assert data_of(broker, "t") == [b"tx-t0"]


def test_a_transactional_batch_without_a_transactional_id_opens_no_transaction(broker):
    producer = Producer(broker, "tx")
    producer.init()
    producer.add(("t", 0))
    assert producer.send(("t", 0, [b"anonymous"]), tid=None)[("t", 0)] != "none"
    assert log_of(broker, "t", 0).log_end_offset == 0


# --- EndTxn ------------------------------------------------------------------------------------------------
def test_commit_writes_a_commit_marker_to_every_partition(broker):
    broker.create_topic("u")
    producer = ongoing(broker, "tx", ("t", 0), ("t", 1), ("u", 0))
    assert producer.send(("t", 0, [b"more"])) == {("t", 0): "none"}
    assert read_committed(broker, "t") == (0, 2, [], [])
    assert producer.end(commit=True) == "none"
    assert markers_of(broker, "t", 0) == [(2, producer.producer_id, producer.epoch, "COMMIT")]
    assert markers_of(broker, "t", 1) == [(1, producer.producer_id, producer.epoch, "COMMIT")]
    assert markers_of(broker, "u", 0) == [(1, producer.producer_id, producer.epoch, "COMMIT")]
    assert read_committed(broker, "t") == (3, 3, [], [b"tx-t0", b"more"])
    assert read_committed(broker, "u") == (2, 2, [], [b"tx-u0"])
    [d] = describe(broker, "tx")
    assert (d.state, d.partitions, d.producer_epoch) == ("CompleteCommit", [], producer.epoch)


def test_abort_writes_an_abort_marker_and_read_committed_is_told(broker):
    broker.produce("t", 0, b"before", timestamps=[now_ms()])  # 0
    producer = ongoing(broker, "tx", ("t", 0))  # 1
    broker.produce("t", 0, b"plain", timestamps=[now_ms()])  # 2: another's, inside the transaction's range
    assert read_committed(broker, "t")[:3] == (1, 3, [])
    assert producer.end(commit=False) == "none"
    assert markers_of(broker, "t") == [(3, producer.producer_id, producer.epoch, "ABORT")]
    lso, hw, aborted, values = read_committed(broker, "t")
    assert (lso, hw, aborted) == (4, 4, [(producer.producer_id, 1)])
    assert values == [b"before", b"tx-t0", b"plain"]  # the consumer drops the aborted producer's batch
    assert describe(broker, "tx")[0].state == "CompleteAbort"


def test_a_retried_end_txn_succeeds_and_a_mismatched_one_is_invalid(broker):
    producer = ongoing(broker, "tx", ("t", 0))
    assert producer.end(commit=True) == "none"
    assert producer.end(commit=True) == "none"  # the answer was lost: the same outcome again
    assert producer.end(commit=False) == "invalid_txn_state"
    assert len(markers_of(broker, "t")) == 1
    aborted = ongoing(broker, "tx2", ("t", 1))
    assert aborted.end(commit=False) == "none"
    assert (aborted.end(commit=False), aborted.end(commit=True)) == ("none", "invalid_txn_state")


def test_end_txn_with_no_transaction_ongoing_is_invalid(broker):
    producer = Producer(broker, "tx")
    producer.init()
    assert producer.end(commit=True) == "invalid_txn_state"
    assert producer.end(commit=False) == "invalid_txn_state"
    assert broker.state("tx") is TxnState.EMPTY


@pytest.mark.parametrize("version,fenced", [(1, "invalid_producer_epoch"), (2, "producer_fenced"),
                                            (3, "producer_fenced")])
def test_end_txn_of_another_producer_id_or_an_older_epoch(broker, version, fenced):
    producer = ongoing(broker, "tx", ("t", 0))
    assert end_txn(broker, "tx", producer.producer_id + 1, producer.epoch, True, version) == \
        "invalid_producer_id_mapping"
    assert end_txn(broker, "tx", producer.producer_id, producer.epoch - 1, True, version) == fenced
    assert end_txn(broker, "tx", producer.producer_id, producer.epoch + 1, True, version) == fenced
    assert broker.state("tx") is TxnState.ONGOING and markers_of(broker, "t") == []


def test_a_partition_of_a_topic_deleted_meanwhile_needs_no_marker(broker):
    broker.create_topic("gone")
    producer = ongoing(broker, "tx", ("t", 0), ("gone", 0))
    answer = broker.send(request(DELETE_TOPICS, 4, topic_names=["gone"], timeout=5000))
    assert errors(answer.responses) == ["none"]
    assert producer.end(commit=True) == "none"
    broker.settle(lambda: broker.state("tx") is TxnState.COMPLETE_COMMIT, "the commit, without the deleted topic")
    assert markers_of(broker, "t") == [(1, producer.producer_id, producer.epoch, "COMMIT")]


def test_a_next_transaction_after_one_ended(broker):
    producer = ongoing(broker, "tx", ("t", 0))
    assert producer.end(commit=False) == "none"
    assert producer.add(("t", 1)) == {("t", 1): "none"}
    [d] = describe(broker, "tx")
    assert (d.state, d.partitions) == ("Ongoing", [("t", 1)])  # the last one's partitions are not carried over
    assert producer.send(("t", 1, [b"second"])) == {("t", 1): "none"}
    assert producer.end(commit=True) == "none"
    assert read_committed(broker, "t", 1)[3] == [b"second"]
    assert markers_of(broker, "t", 0) == [(1, producer.producer_id, producer.epoch, "ABORT")]


# --- AddOffsetsToTxn, TxnOffsetCommit, OffsetFetch require_stable -------------------------------------------
def commit_offset(broker: TxnBroker, group: str, topic: str, partition: int, offset: int) -> None:
    """A plain OffsetCommit (a group without members)."""
    assert broker.run(broker.groups.ensure_offsets_topic()) == ErrorCode.none
    answer = broker.send(request(OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 topics=[{"name": topic, "partitions": [
                                     {"partition_index": partition, "committed_offset": offset}]}]))
    assert errors(p for t in answer.topics for p in t.partitions) == ["none"]


def offsets_ongoing(broker: TxnBroker, group: str = "g", offset: int = 42) -> Producer:
    producer = ongoing(broker, "tx", ("t", 0))
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch, group) == "none"
    assert txn_offset_commit(broker, "tx", group, producer.producer_id, producer.epoch,
                             {("t", 0): offset, ("t", 1): offset + 1}) == {("t", 0): "none", ("t", 1): "none"}
    return producer


def test_add_offsets_puts_the_groups_offsets_partition_in_the_transaction(broker):
    producer = ongoing(broker, "tx", ("t", 0))
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch, "g") == "none"
    offsets_partition = group_partition("g", OFFSETS_PARTITIONS)
    assert sorted(describe(broker, "tx")[0].partitions) == sorted([("t", 0), (OFFSETS_TOPIC, offsets_partition)])
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch - 1, "g", version=1) == \
        "invalid_producer_epoch"
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch - 1, "g", version=2) == "producer_fenced"
    assert add_offsets(broker, "tx", producer.producer_id + 1, producer.epoch, "g") == "invalid_producer_id_mapping"


@pytest.mark.parametrize("fetch_version", [7, 8])
def test_offsets_committed_in_a_transaction_are_unstable_until_it_commits(broker, fetch_version):
    commit_offset(broker, "g", "t", 0, 7)
    producer = offsets_ongoing(broker)
    tps = [("t", 0), ("t", 1)]
    assert committed_offsets(broker, "g", tps, require_stable=True, version=fetch_version) == {
        ("t", 0): (-1, "unstable_offset_commit"), ("t", 1): (-1, "unstable_offset_commit")}
    assert committed_offsets(broker, "g", tps, require_stable=False, version=fetch_version) == {
        ("t", 0): (7, "none"), ("t", 1): (-1, "none")}  # without require_stable: what is committed now
    assert producer.end(commit=True) == "none"
    offsets_partition = group_partition("g", OFFSETS_PARTITIONS)
    assert markers_of(broker, OFFSETS_TOPIC, offsets_partition)[-1][1:] == (producer.producer_id, producer.epoch,
                                                                            "COMMIT")
    assert committed_offsets(broker, "g", tps, require_stable=True, version=fetch_version) == {
        ("t", 0): (42, "none"), ("t", 1): (43, "none")}


def test_an_aborted_transactions_offsets_never_take_effect(broker):
    commit_offset(broker, "g", "t", 0, 7)
    producer = offsets_ongoing(broker)
    assert producer.end(commit=False) == "none"
    assert committed_offsets(broker, "g", [("t", 0), ("t", 1)], require_stable=True) == {
        ("t", 0): (7, "none"), ("t", 1): (-1, "none")}


def test_all_of_a_groups_offsets_with_require_stable_show_the_pending_ones(broker):
    commit_offset(broker, "g", "t", 0, 7)
    offsets_ongoing(broker)
    answer = broker.send(request(OFFSET_FETCH, 7, group_id="g", topics=None, require_stable=True))
    found = {(t.name, p.partition_index): (p.committed_offset, error_name(p.error_code))
             for t in answer.topics for p in t.partitions}
    assert found[("t", 0)] == (-1, "unstable_offset_commit")


def test_a_plain_commit_written_after_a_transactional_one_stays_when_the_transaction_commits(broker):
    producer = offsets_ongoing(broker)  # t-0: 42, pending
    commit_offset(broker, "g", "t", 0, 50)  # appended after the transaction's offsets
    assert producer.end(commit=True) == "none"
    assert committed_offsets(broker, "g", [("t", 0), ("t", 1)], require_stable=True) == {
        ("t", 0): (50, "none"), ("t", 1): (43, "none")}


def test_offsets_of_a_producer_fenced_mid_transaction_are_refused(broker):
    old = offsets_ongoing(broker)
    assert Producer(broker, "tx").init() == "concurrent_transactions"  # a new instance: the old one is aborted
    broker.settle(lambda: broker.state("tx") is TxnState.COMPLETE_ABORT)
    # its coordinator knows the old epoch is fenced (KIP-890's check comes first, as in Kafka)
    result = txn_offset_commit(broker, "tx", "g", old.producer_id, old.epoch, {("t", 0): 99})
    assert result == {("t", 0): "producer_fenced"}
    assert committed_offsets(broker, "g", [("t", 0)], require_stable=True) == {("t", 0): (-1, "none")}


def test_a_zombies_offsets_after_its_transaction_ended_are_refused(broker):
    old = offsets_ongoing(broker)
    assert old.end(commit=True) == "none"
    assert Producer(broker, "tx").init() == "none"  # epoch bumped; the offsets partition has not seen it
    result = txn_offset_commit(broker, "tx", "g", old.producer_id, old.epoch, {("t", 0): 99})
    assert result[("t", 0)] != "none"
    assert committed_offsets(broker, "g", [("t", 0)], require_stable=True) == {("t", 0): (42, "none")}


def test_offsets_of_a_group_not_added_to_the_transaction_are_refused(broker):
    assert broker.run(broker.groups.ensure_offsets_topic()) == ErrorCode.none  # the group's coordinator is up
    producer = ongoing(broker, "tx", ("t", 0))  # no AddOffsetsToTxn
    result = txn_offset_commit(broker, "tx", "g", producer.producer_id, producer.epoch, {("t", 0): 5})
    assert producer.end(commit=True) == "none"
    assert result[("t", 0)] != "none"
    assert committed_offsets(broker, "g", [("t", 0)], require_stable=True) == {("t", 0): (-1, "none")}


def test_txn_offset_commit_of_an_unknown_partition(broker):
    producer = offsets_ongoing(broker)
    assert txn_offset_commit(broker, "tx", "g", producer.producer_id, producer.epoch, {("t", 9): 1, ("t", 0): 50}) \
        == {("t", 9): "unknown_topic_or_partition", ("t", 0): "none"}


# --- fencing and timeouts ---------------------------------------------------------------------------------
def test_a_new_instance_fences_an_ongoing_transaction_which_is_aborted(broker):
    old = ongoing(broker, "tx", ("t", 0), ("t", 1))
    new = Producer(broker, "tx")
    assert new.init() == "concurrent_transactions"  # retriable: the old transaction is being aborted
    broker.settle(lambda: broker.state("tx") is TxnState.COMPLETE_ABORT, "the fenced transaction's abort")
    assert new.init() == "none"
    assert (new.producer_id, new.epoch) == (old.producer_id, old.epoch + 2)  # +1 fenced the abort, +1 for the new
    for partition in (0, 1):
        assert markers_of(broker, "t", partition) == [(1, old.producer_id, old.epoch + 1, "ABORT")]
        assert read_committed(broker, "t", partition)[:3] == (2, 2, [(old.producer_id, 0)])
    # the old instance can do nothing more
    assert old.end(commit=True) == "producer_fenced"
    assert old.add(("t", 0)) == {("t", 0): "producer_fenced"}
    # and the new one goes on
    assert new.add(("t", 0)) == {("t", 0): "none"}
    assert new.send(("t", 0, [b"new"])) == {("t", 0): "none"}
    assert new.end(commit=True) == "none"
    assert read_committed(broker, "t")[3] == [b"tx-t0", b"new"]  # the aborted batch is dropped by the client


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(broker):
    producer = ongoing(broker, "tx", ("t", 0))
    keeps = ongoing(broker, "keeps", ("t", 1))
    assert broker.abort_timed_out(now_ms()) == 0
    assert broker.abort_timed_out(now_ms() + TIMEOUT_MS + 1) == 2
    broker.settle(lambda: broker.state("tx") is broker.state("keeps") is TxnState.COMPLETE_ABORT)
    assert markers_of(broker, "t", 0) == [(1, producer.producer_id, producer.epoch + 1, "ABORT")]
    assert read_committed(broker, "t", 0)[2] == [(producer.producer_id, 0)]
    [d] = describe(broker, "tx")
    assert (d.state, d.producer_epoch) == ("CompleteAbort", producer.epoch + 1)
    assert producer.end(commit=True) == "producer_fenced"
    assert producer.send(("t", 0, [b"late"]))[("t", 0)] != "none"
    assert data_of(broker, "t", 0) == [b"tx-t0"]
    assert keeps.end(commit=False) == "producer_fenced"


def test_an_unused_transactional_id_expires(make_txn_broker):
    broker = make_txn_broker(overrides={"transactional.id.expiration.ms": 1000})
    broker.create_topic("t")
    find(broker, 3, "tx")
    done = ongoing(broker, "tx", ("t", 0))
    assert done.end(commit=True) == "none"
    ongoing(broker, "open", ("t", 0))
    assert broker.abort_timed_out(now_ms() + 1001) == 0  # the open one is within its timeout
    broker.settle(lambda: broker.state("tx") is None, "the expiry")
    assert [d.error for d in describe(broker, "tx", "open")] == ["transactional_id_not_found", "none"]
    # a tombstone in __transaction_state: a restart does not bring it back
    state_log = log_of(broker, TRANSACTION_TOPIC, txn_partition("tx", TXN_PARTITIONS))
    last = [r for b in iter_batches(state_log.read_records(0, 1 << 20)) for r in b.records
            if r.key == txn_records.encode_key("tx")][-1]
    assert last.value is None


# --- DescribeTransactions and ListTransactions -------------------------------------------------------------
def test_describe_transactions_in_each_state(broker):
    empty = Producer(broker, "empty")
    empty.init()
    running = ongoing(broker, "running", ("t", 0), ("t", 1))
    committed = ongoing(broker, "committed", ("t", 0))
    committed.end(commit=True)
    found = {d.transactional_id: d for d in describe(broker, "empty", "running", "committed", "nobody")}
    assert (found["empty"].error, found["empty"].state, found["empty"].start_ms, found["empty"].timeout_ms,
            found["empty"].producer_id, found["empty"].producer_epoch) == (
        "none", "Empty", -1, TIMEOUT_MS, empty.producer_id, 0)
    assert (found["running"].state, sorted(found["running"].partitions)) == ("Ongoing", [("t", 0), ("t", 1)])
    assert found["running"].start_ms > 0 and found["running"].producer_id == running.producer_id
    assert (found["committed"].state, found["committed"].partitions) == ("CompleteCommit", [])
    assert found["nobody"].error == "transactional_id_not_found"
    assert [d.transactional_id for d in describe(broker, "nobody", "empty")] == ["nobody", "empty"]  # asked order


def test_list_transactions_and_its_filters(broker):
    empty = Producer(broker, "empty")
    empty.init()
    running = ongoing(broker, "running", ("t", 0))
    committed = ongoing(broker, "committed", ("t", 1))
    committed.end(commit=True)
    everything = list_transactions(broker)
    assert (everything.error_code, everything.unknown_state_filters) == (ErrorCode.none, ())
    assert listed(everything) == [("committed", committed.producer_id, "CompleteCommit"),
                                  ("empty", empty.producer_id, "Empty"),
                                  ("running", running.producer_id, "Ongoing")]
    assert listed(list_transactions(broker, ["Ongoing"])) == [("running", running.producer_id, "Ongoing")]
    assert [t for t, _, _ in listed(list_transactions(broker, ["Ongoing", "Empty"]))] == ["empty", "running"]
    unknown = list_transactions(broker, ["Running", "Ongoing"])
    assert unknown.unknown_state_filters == ("Running",)
    assert [t for t, _, _ in listed(unknown)] == ["running"]
    only_unknown = list_transactions(broker, ["Running"])
    assert (only_unknown.unknown_state_filters, listed(only_unknown)) == (("Running",), [])
    by_id = list_transactions(broker, producer_ids=[empty.producer_id, committed.producer_id], version=0)
    assert [t for t, _, _ in listed(by_id)] == ["committed", "empty"]
    assert listed(list_transactions(broker, ["Ongoing"], [empty.producer_id])) == []
    # v1: transactions running longer than a duration (this one began two hours ago)
    md = broker.transactions.txns["running"]
    broker.transactions.txns["running"] = md.moved(start_ms=md.start_ms - 7_200_000)
    long_running = [t for t, _, _ in listed(list_transactions(broker, duration_ms=3_600_000))]
    assert "running" in long_running and "committed" not in long_running


# --- a restart: __transaction_state replayed ------------------------------------------------------------------
def test_a_restarted_coordinator_finishes_a_commit_it_had_decided(make_txn_broker, monkeypatch):
    first = make_txn_broker()
    first.create_topic("t", 2)
    find(first, 3, "tx")
    producer = ongoing(first, "tx", ("t", 0), ("t", 1))
    unsettled = ongoing(first, "open", ("t", 1))

    async def crashes_before_the_markers(_md) -> None:
        return None

    monkeypatch.setattr(first.transactions, "_complete", crashes_before_the_markers)
    assert producer.end(commit=True) == "none"  # decided: PrepareCommit is written
    assert first.state("tx") is TxnState.PREPARE_COMMIT and markers_of(first, "t", 0) == []
    make_txn_broker.close(first)

    second = make_txn_broker(first.log_dir)
    second.settle(lambda: second.state("tx") is TxnState.COMPLETE_COMMIT, "the commit finished after the load")
    for partition in (0, 1):
        assert markers_of(second, "t", partition)[0][1:] == (producer.producer_id, producer.epoch, "COMMIT")
    assert read_committed(second, "t", 0) == (2, 2, [], [b"tx-t0"])
    assert read_committed(second, "t", 1)[0] == 1  # "open" is still open there, from offset 1
    # the ongoing one was replayed as it was: its producer goes on with the same id and epoch
    [d] = describe(second, "open")
    assert (d.state, d.partitions, d.producer_id) == ("Ongoing", [("t", 1)], unsettled.producer_id)
    unsettled.broker = second
    assert unsettled.end(commit=False) == "none"
    assert read_committed(second, "t", 1)[2] == [(unsettled.producer_id, 1)]


def test_a_restarted_coordinator_answers_load_in_progress_until_it_has_replayed(make_txn_broker):
    first = make_txn_broker()
    first.create_topic("t")
    find(first, 3, "tx")
    ongoing(first, "tx", ("t", 0))
    make_txn_broker.close(first)
    second = make_txn_broker(first.log_dir, start=False)

    async def started_then_asked():
        second.transactions.start()  # the load goes on in a task, which has not run yet
        return await second.call(request(INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout=TIMEOUT_MS,
                                         producer_id=-1, producer_epoch=-1))

    assert second.run(started_then_asked()).error_code == ErrorCode.coordinator_load_in_progress
    second.settle(lambda: second.state("tx") is TxnState.ONGOING)
    assert init_producer_id(second, "tx").error_code == ErrorCode.concurrent_transactions  # fencing it


def test_pending_transactional_offsets_are_replayed_with_the_groups(make_txn_broker):
    first = make_txn_broker()
    first.create_topic("t", 2)
    find(first, 3, "tx")
    producer = offsets_ongoing(first)
    committed = ongoing(first, "done", ("t", 1))
    assert add_offsets(first, "done", committed.producer_id, committed.epoch, "h") == "none"
    txn_offset_commit(first, "done", "h", committed.producer_id, committed.epoch, {("t", 1): 5})
    assert committed.end(commit=True) == "none"
    make_txn_broker.close(first)

    second = make_txn_broker(first.log_dir)
    second.settle(lambda: second.state("tx") is TxnState.ONGOING)
    assert committed_offsets(second, "g", [("t", 0)], require_stable=True) == {
        ("t", 0): (-1, "unstable_offset_commit")}
    assert committed_offsets(second, "h", [("t", 1)], require_stable=True) == {("t", 1): (5, "none")}
    producer.broker = second
    assert producer.end(commit=True) == "none"
    assert committed_offsets(second, "g", [("t", 0), ("t", 1)], require_stable=True) == {
        ("t", 0): (42, "none"), ("t", 1): (43, "none")}


def test_the_markers_wait_is_bounded(broker, monkeypatch):
    """EndTxn answers once the decision is written even when a partition's marker cannot be written yet."""
    monkeypatch.setattr(coordinator_module, "MARKERS_WAIT_S", 0.05)
    producer = ongoing(broker, "tx", ("t", 0))

    async def refused(calls):
        return [AppendResult(ErrorCode.not_leader_or_follower) for _ in calls]

    monkeypatch.setattr(broker.transactions.owners, "ask_all", refused)
    assert producer.end(commit=True) == "none"
    assert broker.state("tx") is TxnState.PREPARE_COMMIT and markers_of(broker, "t") == []
    assert producer.add(("t", 1)) == {("t", 1): "concurrent_transactions"}
    monkeypatch.undo()
    broker.settle(lambda: broker.state("tx") is TxnState.COMPLETE_COMMIT, "the markers retried")
    assert markers_of(broker, "t")[0][3] == "COMMIT"



# --- races a review found -----------------------------------------------------------------
def test_an_abort_during_the_offsets_replication_wait_drops_them(broker):
    """The offsets are pending from their append: an ABORT marker that reaches
    the offsets partition while TxnOffsetCommit waits for the replicas (a
    follower fetch, in a cluster) drops them, rather than finding nothing and
    leaving them pending for good (and applied by the next instance's commit)."""
    producer = ongoing(broker, "tx", ("t", 0))
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch, "g") == "none"
    groups = broker.groups
    real = groups._replicated

    async def slow_replicated(group_id, end_offset):
        broker.transactions.abort_timed_out(now_ms() + TIMEOUT_MS + 10)  # its timeout, meanwhile
        while broker.state("tx") is not TxnState.COMPLETE_ABORT:
            await asyncio.sleep(0.001)
        return await real(group_id, end_offset)

    groups._replicated = slow_replicated
    call = TxnOffsetCommit("g", "tx", producer.producer_id, producer.epoch, -1, "", None, [("t", 0, 42, -1, "m")])
    try:
        broker.run(groups.txn_offset_commit(call))
    finally:
        groups._replicated = real
    assert not groups.offsets.is_pending("g", "t", 0)
    new = Producer(broker, "tx")
    assert new.init() == "none"
    assert new.add(("t", 1)) == {("t", 1): "none"}
    assert add_offsets(broker, "tx", new.producer_id, new.epoch, "g") == "none"
    assert txn_offset_commit(broker, "tx", "g", new.producer_id, new.epoch, {("t", 1): 7}) == {("t", 1): "none"}
    assert new.end(commit=True) == "none"
    assert committed_offsets(broker, "g", [("t", 0), ("t", 1)], require_stable=True) == {
        ("t", 0): (-1, "none"), ("t", 1): (7, "none")}


def test_a_marker_during_the_offsets_partitions_replay_is_met_by_the_replay(broker, monkeypatch):
    """A marker written to an offsets partition while it is being replayed is
    left to the replay, which meets it in its place: settled at once, it would
    drop (or apply) the pending offsets of a transaction whose own marker the
    replay has not read yet."""
    p = group_partition("g", OFFSETS_PARTITIONS)
    producer = ongoing(broker, "tx", ("t", 0))
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch, "g") == "none"
    assert txn_offset_commit(broker, "tx", "g", producer.producer_id, producer.epoch, {("t", 0): 10}) == {
        ("t", 0): "none"}
    assert producer.end(commit=True) == "none"
    assert producer.add(("t", 1)) == {("t", 1): "none"}
    assert add_offsets(broker, "tx", producer.producer_id, producer.epoch, "g") == "none"
    assert txn_offset_commit(broker, "tx", "g", producer.producer_id, producer.epoch, {("t", 1): 20}) == {
        ("t", 1): "none"}
    monkeypatch.setattr(state_partitions, "LOAD_CHUNK_BYTES", 1)  # one batch per chunk: a boundary anywhere
    groups, pid = broker.groups, producer.producer_id

    async def reload_with_a_marker_in_between():
        groups.leadership_changed(p, False)  # replayed afresh, as after a restart
        groups._load_in_background(p)
        while ("g", "t", 0) not in groups.offsets._pending.get(pid, {}):
            await asyncio.sleep(0)  # the replay has read the first transaction's offsets, not its marker
        written = broker.partitions.write_marker(WriteMarker(OFFSETS_TOPIC, p, pid, producer.epoch + 1, 0, False))
        assert written.error == ErrorCode.none  # the second transaction aborted meanwhile
        while p in groups._loading:
            await asyncio.sleep(0)

    broker.run(reload_with_a_marker_in_between())
    assert committed_offsets(broker, "g", [("t", 0), ("t", 1)], require_stable=True) == {
        ("t", 0): (10, "none"), ("t", 1): (-1, "none")}


def test_an_id_used_again_as_it_expires_is_not_forgotten(make_txn_broker):
    """The expiry's tombstone is written only if the id is still what the
    check saw: a call handled in between keeps it (and its transaction) alive
    in the log too, so a restart still knows it."""
    broker = make_txn_broker(overrides={"transactional.id.expiration.ms": 1000})
    broker.create_topic("t")
    find(broker, 3, "tx")
    producer = ongoing(broker, "tx", ("t", 0))
    assert producer.end(commit=True) == "none"
    coordinator = broker.transactions

    async def race():
        add = asyncio.get_running_loop().create_task(
            coordinator.add_partitions(AddTxnPartitions("tx", producer.producer_id, producer.epoch, [("t", 0)])))
        coordinator.abort_timed_out(now_ms() + 2000)  # the periodic check, with the call queued
        answer = await add
        for _ in range(20):
            await asyncio.sleep(0)
        return answer

    assert broker.run(race()).error == ErrorCode.none
    assert broker.state("tx") is TxnState.ONGOING
    assert producer.send(("t", 0, [b"x"])) == {("t", 0): "none"}
    broker.close()
    again = make_txn_broker(log_dir=broker.log_dir)
    again.settle(lambda: not again.transactions._loading)
    assert again.state("tx") is TxnState.ONGOING
    assert again.abort_timed_out(now_ms() + 10 * TIMEOUT_MS) == 1  # so its timeout still ends it
