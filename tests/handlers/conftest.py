"""One standalone worker, in process, for calling the request handlers.

``make_broker(overrides)`` assembles what ``Worker.boot()`` and ``serve()``
wire in a worker, without sockets, forks or ZooKeeper: a temporary log dir,
the ``TopicRegistry``, ``LogManager(...).open()``, ``Partitions``, the
``GroupCoordinator`` and ``TransactionCoordinator``, a ``LocalOwner`` over
them, ``Owners`` for one worker
(no peers: every owner is this worker) and the ``WorkerContext``.  The
harness owns one event loop; ``run(coro)`` runs a scenario on it, so group
timers and purgatory waits live on the loop that answers them.

A request goes the way the connection sends it (``KafkaConnection._handle``):
the kio request object is framed with the client codec, decoded by the
server's ``decode_request`` (so the handler sees exactly what a client's bytes
turn into), handed to ``ROUTES[api_key]``, and the answer is framed by
``encode_response`` and read back with the client codec's ``decode_response``:
a test asserts on what a client would read.  A Fetch answer (a list of pieces)
is joined, its ``FileRegion``s read from the segment files.

Requests are built with ``request(api_key, version, **fields)``: nested
entities as dicts, timeouts in milliseconds, and fields the version lacks
ignored (as ``kio_build.make`` does for responses), so one description serves
two versions.  Fields left out take their schema default, or null, or a zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import struct
from collections.abc import Mapping
from functools import cache
from types import SimpleNamespace
from typing import Any

import pytest
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from harness.request_samples import request_schema
from hpbroker.errors import ErrorCode
from hpbroker.protocol import client_codec
from hpbroker.protocol.codec import decode_request, encode_response
from hpbroker.protocol.exceptions import UnsupportedVersion
from hpbroker.protocol.schemas import API_VERSIONS, FETCH, LEGACY_PRODUCE_MAX, PRODUCE
from hpbroker.protocol.versions import unsupported_api_versions_response
from hpbroker.records import Record, encode_batch, iter_batches
from hpbroker.server.config import BrokerConfig
from hpbroker.server.ownership import OFFSETS_TOPIC
from hpbroker.shared.broker_memory import BrokerMemory
from hpbroker.shared.counters import TopicChanges
from hpbroker.storage import LogManager
from hpbroker.workers.client_identity import CLIENT_HOST
from hpbroker.workers.context import BrokerIdentity, Later, WorkerContext
from hpbroker.workers.fetch_response import FileRegion
from hpbroker.workers.groups import GroupCoordinator
from hpbroker.workers.handlers import ROUTES
from hpbroker.workers.owners import LocalOwner, Owners
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.publisher import Publisher
from hpbroker.workers.topics import TopicRegistry
from hpbroker.workers.transactions import TransactionCoordinator, markers

CLUSTER_ID = "handlers-test-cluster"
HOST, PORT = "127.0.0.1", 19092
CLIENT_ID = "handler-tests"
CLIENT_HOST_SEEN = "/127.0.0.1"
OFFSETS_PARTITIONS = 3  # a small __consumer_offsets: created by FindCoordinator in many tests

# api keys, for readability in the tests
(PRODUCE_KEY, FETCH_KEY, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP,
 HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS_KEY, CREATE_TOPICS, DELETE_TOPICS,
 DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS,
 CREATE_PARTITIONS, DELETE_GROUPS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS, ALTER_REASSIGNMENTS,
 LIST_REASSIGNMENTS, OFFSET_DELETE, DESCRIBE_CLUSTER) = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20,
                                                          21, 22, 23, 32, 33, 35, 37, 42, 43, 44, 45, 46, 47, 60)

_int16 = struct.Struct(">h")


# --- building kio requests -------------------------------------------------------------
_TIMEDELTAS = ("timedelta_i32", "timedelta_i64")
_ZEROS = {"bool": False, "string": "", "bytes": b"", "float64": 0.0}


def _primitive(kafka_type: str, value):
    if kafka_type in _TIMEDELTAS and not isinstance(value, datetime.timedelta):
        return datetime.timedelta(milliseconds=value)
    return value


def _neutral(field, shape):
    """The value of a field a test left out and the schema gives no default."""
    if is_optional(field):
        return None
    if shape.is_array:
        return ()
    kafka_type = get_schema_field_type(field)
    if kafka_type in _TIMEDELTAS:
        return datetime.timedelta(0)
    return _ZEROS.get(kafka_type, 0)


def build(entity_type: type, values: Mapping):
    """``entity_type`` (a kio request or nested entity) from plain values."""
    kwargs = {}
    for field in dataclasses.fields(entity_type):
        shape = classify_field(field)
        if field.name not in values:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                kwargs[field.name] = _neutral(field, shape)
            continue
        value = values[field.name]
        if value is None:
            pass
        elif isinstance(shape, EntityTupleField):
            value = tuple(build(shape.type_, v) if isinstance(v, Mapping) else v for v in value)
        elif isinstance(shape, EntityField) and isinstance(value, Mapping):
            value = build(shape.type_, value)
        elif isinstance(shape, PrimitiveTupleField):
            value = tuple(value)
        else:
            value = _primitive(get_schema_field_type(field), value)
        kwargs[field.name] = value
    return entity_type(**kwargs)


def request(api_key: int, version: int, **fields):
    """The kio request of ``api_key`` at ``version`` (Produce v0-v2: kio's v3 class)."""
    return build(request_schema(api_key, version), fields)


def grouped(rows, *, topic_key: str = "name", partition_key: str = "partition_index",
            partitions_key: str = "partitions") -> list[dict]:
    """``[(topic, partition, {fields})]`` as a request's topic list, topics in
    their first order: ``[{topic_key: t, partitions_key: [{partition_key: p, **fields}]}]``."""
    topics: dict[str, list] = {}
    for topic, partition, fields in rows:
        topics.setdefault(topic, []).append({partition_key: partition, **fields})
    return [{topic_key: topic, partitions_key: parts} for topic, parts in topics.items()]


def flattened(topics, *, name: str = "name", partitions: str = "partitions") -> list[tuple]:
    """``[(topic name, partition entity)]`` of a response's topic list."""
    return [(getattr(t, name), p) for t in topics for p in getattr(t, partitions)]


# --- records ---------------------------------------------------------------------------
def batch(*values: bytes, keys=None, timestamps=None, **kwargs) -> bytes:
    """One v2 batch of ``values`` (offsets from 0, as a producer writes them)."""
    keys = keys or [None] * len(values)
    timestamps = timestamps or [1_700_000_000_000 + i for i in range(len(values))]
    return encode_batch([Record(i, ts, k, v) for i, (k, v, ts) in enumerate(zip(keys, values, timestamps))], **kwargs)


def records_of(data: bytes | None) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in ``data`` (whole batches)."""
    return [(r.offset, r.key, r.value) for b in iter_batches(data or b"") for r in b.records]


def values_of(data: bytes | None) -> list[bytes | None]:
    return [value for _offset, _key, value in records_of(data)]


def produce_request(version: int, topic: str, partition: int, records, *, acks: int = 1, timeout_ms: int = 5000):
    return request(PRODUCE_KEY, version, acks=acks, timeout=timeout_ms,
                   topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}])


def fetch_request(version: int, partitions, *, max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 1 << 20,
                  partition_max_bytes: int = 1 << 20, leader_epoch: int = -1, topic_ids=None, **fields):
    """Fetch of ``partitions``: [(topic, partition, offset)]; from v13 topics go by
    their id (``topic_ids``: name -> uuid)."""
    by_topic: dict[str, list] = {}
    for topic, partition, offset in partitions:
        by_topic.setdefault(topic, []).append({"partition": partition, "fetch_offset": offset,
                                               "partition_max_bytes": partition_max_bytes,
                                               "current_leader_epoch": leader_epoch})
    topics = [{"topic": name, "topic_id": (topic_ids or {}).get(name), "partitions": parts}
              for name, parts in by_topic.items()]
    return request(FETCH_KEY, version, max_wait=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                   topics=topics, **fields)


# --- consumer groups ------------------------------------------------------------------------
PROTOCOL_TYPE = "consumer"
SESSION_MS = 10_000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: int16 version, then the topics as an array of strings."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)  # no user data


def join_request(version: int, group: str, member_id: str = "", *, topics=("t",), instance_id=None,
                 protocol_type: str = PROTOCOL_TYPE, protocols=("range",), session_ms: int = SESSION_MS):
    return request(JOIN_GROUP, version, group_id=group, member_id=member_id, group_instance_id=instance_id,
                   session_timeout=session_ms, rebalance_timeout=session_ms, protocol_type=protocol_type,
                   protocols=[{"name": name, "metadata": subscription(*topics)} for name in protocols])


def sync_request(version: int, group: str, generation: int, member_id: str, assignments=None, **fields):
    return request(SYNC_GROUP, version, group_id=group, generation_id=generation, member_id=member_id,
                   assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()], **fields)


async def join(broker, group: str, version: int = 5, member_id: str = "", **kwargs):
    """JoinGroup as a client does it: from v4 the first answer hands out a member
    id (MEMBER_ID_REQUIRED, KIP-394) to join with."""
    answer = await broker.call(join_request(version, group, member_id, **kwargs))
    if answer.error_code == ErrorCode.member_id_required:
        answer = await broker.call(join_request(version, group, answer.member_id, **kwargs))
    return answer


async def stable(broker, group: str, assignment: bytes = b"", **kwargs):
    """A group of one member, joined and synced (Stable); its JoinGroup answer."""
    joined = await join(broker, group, **kwargs)
    assert joined.error_code == ErrorCode.none, joined
    synced = await broker.call(sync_request(3, group, joined.generation_id, joined.member_id,
                                            {joined.member_id: assignment}))
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, assignment)
    return joined


async def until(condition, what: str = "the condition") -> None:
    """Let the other tasks on the loop run until ``condition()`` holds (no timer involved)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what} never came about")


# --- framing, the way a client and the connection do -------------------------------------
def _frame(req, version: int, client_id: str | None) -> bytes:
    """The request frame (no size prefix) claiming wire ``version``; kio's Produce
    v3 object, sent as v0-v2, loses its null transactional id as legacy_produce
    expects."""
    frame = bytearray(client_codec.encode_request(req, 7, client_id)[4:])
    if version != int(req.__version__):
        _int16.pack_into(frame, 2, version)
        if int(req.__api_key__) == PRODUCE and version <= LEGACY_PRODUCE_MAX:
            start = 8 + 2 + len((client_id or "").encode())
            assert req.transactional_id is None and frame[start:start + 2] == b"\xff\xff"
            del frame[start:start + 2]
    return bytes(frame)


def _joined(pieces) -> bytes:
    """A Fetch answer's pieces as the bytes sendfile would have sent; its
    duplicated descriptors closed, as the connection closes them."""
    out = bytearray()
    for piece in pieces:
        if isinstance(piece, FileRegion):
            out += os.pread(piece.fd, piece.size, piece.position)
            os.close(piece.fd)
        else:
            out += piece
    return bytes(out)


class Harness:
    """A standalone worker's context in process (see the module docstring)."""

    def __init__(self, log_dir: str, overrides: Mapping | None = None):
        props = {"log.dirs": log_dir, "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                 "group.initial.rebalance.delay.ms": "0", "listeners": f"PLAINTEXT://{HOST}:{PORT}"}
        props.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (overrides or {}).items()})
        self.config = cfg = BrokerConfig.from_sources(overrides=props)
        self.log_dir = cfg.log_dirs[0]
        self.loop = asyncio.new_event_loop()
        for log_dir_path in cfg.log_dirs:  # the acceptor's work (it holds the roots)
            os.makedirs(log_dir_path, exist_ok=True)
        # the memory a broker's acceptor shares with its workers, as a one-worker broker has it
        self.memory = BrokerMemory.create(1, partition_slots=256)
        self.topics = TopicRegistry(cfg.log_dirs, cfg.log, broker_id=cfg.broker_id,
                                    changes=TopicChanges(self.memory.topic_changes, 0))
        self.logs = LogManager(cfg.log_dirs, cfg.log, broker_id=cfg.broker_id, cluster_id=CLUSTER_ID,
                               config_for=self.topics.config_for, manage_root=False).open(clean_shutdown=True)
        self.partitions = Partitions(self.logs, self.topics, publisher=Publisher(self.memory.partitions.writer(0)))
        self.groups = GroupCoordinator(self.partitions, self.topics, cfg, 0, 1)
        self.transactions = TransactionCoordinator(self.partitions, self.topics, cfg, 0, 1)
        self.partitions.on_marker = lambda topic, p, producer_id, commit: (
            self.groups.transaction_ended(p, producer_id, commit) if topic == OFFSETS_TOPIC else None)
        self.local_owner = LocalOwner({**self.partitions.handlers(), **self.groups.handlers(),
                                       **self.transactions.handlers()})
        owners = Owners(0, 1, self.local_owner, None, cfg["offsets.topic.num.partitions"],
                        cfg["transaction.state.log.num.partitions"])
        listener = cfg.inter_broker_endpoint
        self.identity = BrokerIdentity(cfg.broker_id, CLUSTER_ID, listener.host, listener.port)
        self.ctx = WorkerContext(cfg, 0, 1, self.identity, self.topics, owners, groups=self.groups,
                                 transactions=self.transactions, partition_offsets=self.memory.partitions.reader())
        self.transactions.attach(owners, self.ctx.producer_ids, self.ctx.cluster)
        self.groups.verify = lambda call: markers.verify(self.ctx, call)
        self.run(self._started())

    async def _started(self) -> None:
        self.groups.start()  # arms its expiry timer on this loop
        self.transactions.start()

    def run(self, coro):
        """Run ``coro`` (a scenario, or one call) on the harness's loop."""
        return self.loop.run_until_complete(coro)

    async def call(self, req, *, version: int | None = None, client_id: str | None = CLIENT_ID) -> Any:
        """Send ``req`` (a kio request) as a client would, claiming wire ``version``
        (default: the object's own) and return what the client reads back: the
        kio response, or None where none is sent (Produce with acks=0).  Produce
        v0/v1 answers, which kio cannot read, are read here into the same names."""
        version = int(req.__version__) if version is None else version
        frame = _frame(req, version, client_id)
        try:
            header, decoded = decode_request(frame)
        except UnsupportedVersion as exc:  # the connection's answer, for ApiVersions only
            if exc.header.api_key != API_VERSIONS:
                raise
            header, response = exc.header, unsupported_api_versions_response()
        else:
            CLIENT_HOST.set(CLIENT_HOST_SEEN)
            response = await ROUTES[header.api_key](self.ctx, header, decoded)
            if isinstance(response, Later):  # owed: the connection writes it once made
                response = await response.rest
        if response is None:
            return None
        api_key = header.api_key
        if isinstance(response, list):  # written by the handler itself: Fetch, Produce, ListOffsets
            assert api_key in (FETCH, PRODUCE, LIST_OFFSETS), "only Fetch, Produce and ListOffsets answer with pieces"
            data = _joined(response)
            (size,) = struct.unpack_from(">i", data)
            assert size == len(data) - 4, "the size prefix covers the frame"
            wire = data[4:]
            wire_version = header.api_version
            if api_key == PRODUCE and wire_version < LEGACY_PRODUCE_MAX:
                return _legacy_produce_answer(wire, header.correlation_id)  # kio reads none older than v2
        else:
            wire = encode_response(header, response)[4:]
            wire_version = header.api_version
            if api_key == API_VERSIONS:
                wire_version = int(response.__version__)  # the v0 fallback to an unsupported version
            if api_key == PRODUCE and wire_version < LEGACY_PRODUCE_MAX:
                return response
        correlation_id, decoded_response = client_codec.decode_response(api_key, wire_version, wire)
        assert correlation_id == header.correlation_id
        return decoded_response

    def gather(self, *coros) -> list:
        """Run ``coros`` concurrently (as requests on several connections); their results."""
        async def together():
            return await asyncio.gather(*coros)
        return self.run(together())

    def tick(self) -> None:
        """The worker's periodic work (every 100 ms there): topics changed
        elsewhere noticed, changed topic settings applied to the open logs."""
        self.partitions.tick()

    def send(self, req, **kwargs):
        """``call`` run to its answer."""
        return self.run(self.call(req, **kwargs))

    # --- what many tests set up ----------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, configs: Mapping | None = None):
        """Made through the registry, as another worker's CreateTopics would."""
        return self.run(self.topics.create(name, partitions, dict(configs or {})))

    def topic_id(self, name: str):
        info = self.topics.get(name)
        assert info is not None, f"no topic {name}"
        return info.topic_id

    def produce(self, topic: str, partition: int, *values: bytes, version: int = 9, acks: int = 1, **batch_kwargs):
        """Produce one batch of ``values``; the partition's answer."""
        answer = self.send(produce_request(version, topic, partition, batch(*values, **batch_kwargs), acks=acks))
        [t] = answer.responses
        [p] = t.partition_responses
        return p

    def fetch(self, version: int, partitions, **kwargs):
        """A Fetch answer; from v13 the topics' ids are the broker's own."""
        if version >= 13 and "topic_ids" not in kwargs:
            kwargs["topic_ids"] = {t: self.topic_id(t) for t, _p, _o in partitions}
        return self.send(fetch_request(version, partitions, **kwargs))

    def read(self, topic: str, partition: int = 0, offset: int = 0, version: int = 12):
        """(error, values) of one partition read from ``offset``."""
        [t] = self.fetch(version, [(topic, partition, offset)]).responses
        [p] = t.partitions
        return p.error_code, values_of(p.records)

    def close(self) -> None:
        self.groups.close()
        self.transactions.close()
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.ctx.segment_files.close()
        self.logs.close()
        self.loop.close()


@pytest.fixture
def make_broker(tmp_path):
    """``make_broker(overrides)``: a harness over a fresh log dir (config keys as
    in server.properties); several may be made in one test, each its own dir."""
    made = []

    def make(overrides: Mapping | None = None) -> Harness:
        log_dir = tmp_path / f"logs{len(made)}"
        log_dir.mkdir()
        harness = Harness(str(log_dir), overrides)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


@pytest.fixture
def broker(make_broker) -> Harness:
    return make_broker()


@pytest.fixture
def coordinated(broker) -> Harness:
    """A broker a consumer has found its coordinator on (``__consumer_offsets``
    made, as FindCoordinator does), with a topic "t" of two partitions."""
    broker.create_topic("t", 2)
    broker.run(broker.groups.ensure_offsets_topic())
    return broker


@cache
def error_name(code: int) -> str:
    return ErrorCode(code).name


def _legacy_produce_answer(wire: bytes, correlation_id: int) -> SimpleNamespace:
    """A Produce v0/v1 answer (topics of (index, error, base offset)), with kio's attribute names."""
    (seen, topics), pos = struct.unpack_from(">ii", wire), 8
    assert seen == correlation_id
    responses = []
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", wire, pos)
        name = wire[pos + 2:pos + 2 + length].decode()
        (count,), pos = struct.unpack_from(">i", wire, pos + 2 + length), pos + 6 + length
        partitions = []
        for _ in range(count):
            index, error, base_offset = struct.unpack_from(">ihq", wire, pos)
            partitions.append(SimpleNamespace(index=index, error_code=error, base_offset=base_offset))
            pos += 14
        responses.append(SimpleNamespace(name=name, partition_responses=partitions))
    return SimpleNamespace(responses=responses)


def errors(items, attribute: str = "error_code") -> list[str]:
    """The error names of ``items`` (readable assertion failures)."""
    return [error_name(getattr(x, attribute)) for x in items]
