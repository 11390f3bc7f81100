"""``hpbroker transactions list|describe|describe-producers``: transactions as
their coordinators keep them and the producers a partition's leader knows,
like Kafka's ``kafka-transactions.sh``.

* ``list`` sends ListTransactions (66) to every broker a Metadata request
  names (each coordinates some transactional ids) and merges the answers.
* ``describe`` asks FindCoordinator (key type 1) which broker coordinates the
  id, then DescribeTransactions (65) there.
* ``describe-producers`` sends DescribeProducers (61) to the partition's
  leader: what to look at when a transaction holds a partition's last stable
  offset back.

confluent-kafka's admin client has none of these, so the requests go through
``kafka_requests`` (kio frames on a plain socket).
"""

import argparse
import datetime
import time
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.describe_transactions.v0 import response as described_v0
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta, i64

from hpbroker.cli import output
from hpbroker.cli.connection import CliError, add_connection_args, command_config, guarded
from hpbroker.cli.kafka_requests import (
    FIND_COORDINATOR,
    Brokers,
    Node,
    Retry,
    build,
    error_name,
    request_module,
    security_of,
    until_answered,
)
from hpbroker.errors import ErrorCode

PREFIX = "hpbroker transactions"
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
TRANSACTION_KEY = 1  # FindCoordinator's key type for a transactional id
# Kafka's names of the states (TransactionState), for the help and for an unknown --state
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "PrepareEpochFence", "Dead")
_OPEN = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


# DescribeTransactions v0's answer as kio reads it, but for the start time: Kafka
# sends -1 there when no transaction is open (and for an unknown id), which kio's
# ``datetime_i64`` reader refuses ("Cannot parse negative timestamp"); read as an
# int64 it is the epoch milliseconds it is on the wire.  (kio's native reader
# resolves these annotations itself: no ``from __future__ import annotations`` here.)
@dataclass(frozen=True, slots=True, kw_only=True)
class _TransactionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_TRANSACTIONS)
    __header_schema__: ClassVar = described_v0.ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[described_v0.TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _DescribeTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_TRANSACTIONS)
    __header_schema__: ClassVar = described_v0.ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[_TransactionState, ...]


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "transactions", help="list and describe transactions, and the producers of a partition (kafka-transactions)",
        description="Transactions as their coordinators keep them (ListTransactions, DescribeTransactions) and "
                    "the producers a partition's leader knows (DescribeProducers), like kafka-transactions.sh.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    p = actions.add_parser(
        "list", help="every transactional id of the cluster: coordinator, producer id, state",
        description="List the transactional ids every broker coordinates (ListTransactions to each broker "
                    "Metadata names, merged), with their producer id and state.")
    p.add_argument("--state", action="extend", nargs="+", default=[], metavar="STATE",
                   help=f"only transactions in these states (repeatable): {', '.join(STATES)}")
    p.add_argument("--producer-id", action="extend", nargs="+", type=_non_negative("producer id"), default=[],
                   metavar="ID", help="only transactions of these producer ids (repeatable)")
    p.add_argument("--duration-ms", type=_non_negative("duration"), metavar="MS",
                   help="only transactions that started more than MS ago (ListTransactions v1; an ended "
                        "transaction keeps its start time, so it can match too)")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=list_transactions)

    p = actions.add_parser(
        "describe", help="one transactional id: producer, epoch, state, timeout, start, partitions",
        description="Find the coordinator of a transactional id (FindCoordinator) and describe it there "
                    "(DescribeTransactions): producer id and epoch, state, timeout, when the current "
                    "transaction started and how long it has been open, and the partitions in it.")
    p.add_argument("--transactional-id", required=True, metavar="ID", help="the transactional id to describe")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=describe_transaction)

    p = actions.add_parser(
        "describe-producers", help="a partition's active producers and their open transactions",
        description="Ask the leader of a partition for its active producers (DescribeProducers): id, epoch, "
                    "last sequence and timestamp, coordinator epoch, and the first offset of the producer's "
                    "open transaction, the one holding the partition's last stable offset back.")
    p.add_argument("--topic", required=True, metavar="TOPIC")
    p.add_argument("--partition", required=True, type=_non_negative("partition"), metavar="P")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=describe_producers)


def _non_negative(what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(f"want a {what} of 0 or more, got {text!r}")
        return value
    return parse


def run(args) -> int:
    def connected(args):
        security = security_of(command_config(args))
        with Brokers(args.bootstrap_server, args.timeout, security) as brokers:
            return args.action_fn(args, brokers)
    return guarded(PREFIX, connected, args)


# --- list -----------------------------------------------------------------------------------------
def list_transactions(args, brokers: Brokers) -> int:
    nodes = brokers.nodes(brokers.metadata([]))
    if not nodes:
        raise CliError("the broker's Metadata names no brokers")
    found: dict[str, dict] = {}
    for node in sorted(nodes.values(), key=lambda n: n.node_id):
        for row in until_answered(lambda node=node: _listed(args, brokers, node), args.timeout):
            found.setdefault(row["transactional_id"], row)
    rows = [found[tid] for tid in sorted(found)]
    if args.json:
        output.emit_json(rows)
    else:
        output.table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
                     [[r["transactional_id"], r["coordinator"], r["producer_id"], r["state"]] for r in rows])
    return 0


def _listed(args, brokers: Brokers, node: Node) -> list[dict]:
    conn = brokers.to(node)
    version = conn.version(LIST_TRANSACTIONS, "ListTransactions", 0, 1)
    if args.duration_ms is not None and version < 1:
        raise CliError(f"broker {node.node_id} does not support --duration-ms (it needs ListTransactions v1)")
    m = request_module(LIST_TRANSACTIONS, version)
    answer = conn.request(build(m.ListTransactionsRequest, state_filters=tuple(args.state),
                                producer_id_filters=tuple(args.producer_id),
                                duration_filter=-1 if args.duration_ms is None else args.duration_ms))
    if answer.error_code != ErrorCode.none:
        text = f"broker {node.node_id} cannot list its transactions: {error_name(answer.error_code)}"
        if ErrorCode(answer.error_code).retriable:
            raise Retry(text)
        raise CliError(text)
    if answer.unknown_state_filters:
        unknown = ", ".join(repr(s) for s in answer.unknown_state_filters)
        raise CliError(f"unknown --state {unknown}: the states are {', '.join(STATES)}")
    return [{"transactional_id": t.transactional_id, "coordinator": node.node_id, "producer_id": int(t.producer_id),
             "state": t.transaction_state} for t in answer.transaction_states]


# --- describe -------------------------------------------------------------------------------------
def describe_transaction(args, brokers: Brokers) -> int:
    tid = args.transactional_id
    described = until_answered(lambda: _described(brokers, tid), args.timeout)
    if args.json:
        output.emit_json(described)
        return 0
    partitions = ",".join(f"{t}-{p}" for t, p in described["partitions"]) or "-"
    output.table(["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "START-TIME",
                  "DURATION", "TOPIC-PARTITIONS"],
                 [[described["coordinator"], tid, described["producer_id"], described["producer_epoch"],
                   described["state"], described["timeout_ms"], _time(described["start_time_ms"]),
                   _duration(described["duration_ms"]), partitions]])
    return 0


def _described(brokers: Brokers, tid: str) -> dict:
    coordinator = _coordinator(brokers, tid)
    conn = brokers.to(coordinator)
    m = request_module(DESCRIBE_TRANSACTIONS, conn.version(DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0))
    answer = conn.request(m.DescribeTransactionsRequest(transactional_ids=(tid,)), reads=_DescribeTransactionsResponse)
    state = next((s for s in answer.transaction_states if s.transactional_id == tid), None)
    if state is None:
        raise CliError(f"broker {coordinator.node_id} did not describe transactional id {tid!r}")
    error = ErrorCode(state.error_code)
    if error == ErrorCode.transactional_id_not_found:
        raise CliError(f"transactional id {tid!r} does not exist")
    if error != ErrorCode.none:
        text = f"cannot describe transactional id {tid!r}: {error_name(error)}"
        if error.retriable:  # not_coordinator (it moved), coordinator_load_in_progress
            raise Retry(text)
        raise CliError(text)
    start_ms = int(state.transaction_start_time)
    open_now = state.transaction_state in _OPEN and start_ms >= 0
    return {"coordinator": coordinator.node_id, "transactional_id": tid, "producer_id": int(state.producer_id),
            "producer_epoch": int(state.producer_epoch), "state": state.transaction_state,
            "timeout_ms": round(state.transaction_timeout.total_seconds() * 1000),
            "start_time_ms": start_ms if start_ms >= 0 else None,
            "duration_ms": max(0, int(time.time() * 1000) - start_ms) if open_now else None,
            "partitions": sorted((t.topic, int(p)) for t in state.topics for p in t.partitions)}


def _coordinator(brokers: Brokers, tid: str) -> Node:
    conn = brokers.bootstrap
    version = conn.version(FIND_COORDINATOR, "FindCoordinator", 1, 4)  # key types came with v1, batches with v4
    m = request_module(FIND_COORDINATOR, version)
    if version >= 4:
        [found] = conn.request(m.FindCoordinatorRequest(key_type=TRANSACTION_KEY, coordinator_keys=(tid,))).coordinators
    else:
        found = conn.request(m.FindCoordinatorRequest(key=tid, key_type=TRANSACTION_KEY))
    error = ErrorCode(found.error_code)
    if error != ErrorCode.none:
        text = f"cannot find the coordinator of transactional id {tid!r}: {found.error_message or error_name(error)}"
        if error.retriable:  # coordinator_not_available while __transaction_state is created
            raise Retry(text)
        raise CliError(text)
    return Node(int(found.node_id), found.host, int(found.port))


# --- describe-producers ---------------------------------------------------------------------------
def describe_producers(args, brokers: Brokers) -> int:
    leader, producers = until_answered(lambda: _producers(brokers, args.topic, args.partition), args.timeout)
    if args.json:
        output.emit_json({"topic": args.topic, "partition": args.partition, "leader": leader,
                          "producers": producers})
        return 0
    output.table(["PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP", "COORDINATOR-EPOCH",
                  "TXN-START-OFFSET"],
                 [[p["producer_id"], p["producer_epoch"], p["last_sequence"], _time(p["last_timestamp_ms"]),
                   p["coordinator_epoch"], p["current_txn_start_offset"]] for p in producers])
    return 0


def _producers(brokers: Brokers, topic: str, partition: int) -> tuple[int, list[dict]]:
    metadata = brokers.metadata([topic])
    described = next((t for t in metadata.topics if t.name == topic), None)
    if described is None or described.error_code == ErrorCode.unknown_topic_or_partition:
        raise CliError(f"topic {topic!r} does not exist")
    if described.error_code != ErrorCode.none:
        text = f"topic {topic!r}: {error_name(described.error_code)}"
        if ErrorCode(described.error_code).retriable:
            raise Retry(text)
        raise CliError(text)
    found = next((p for p in described.partitions if p.partition_index == partition), None)
    if found is None:
        raise CliError(f"topic {topic!r} has no partition {partition}")
    leader = brokers.nodes(metadata).get(int(found.leader_id))
    if leader is None:
        raise Retry(f"{topic}[{partition}] has no leader")
    conn = brokers.to(leader)
    m = request_module(DESCRIBE_PRODUCERS, conn.version(DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0))
    answer = conn.request(m.DescribeProducersRequest(
        topics=(m.TopicRequest(name=topic, partition_indexes=(partition,)),)))
    got = next((p for t in answer.topics if t.name == topic for p in t.partitions if p.partition_index == partition),
               None)
    if got is None:
        raise CliError(f"broker {leader.node_id} did not describe {topic}[{partition}]")
    error = ErrorCode(got.error_code)
    if error != ErrorCode.none:
        text = f"{topic}[{partition}]: {got.error_message or error_name(error)}"
        if error.retriable:  # not_leader_or_follower: the leader moved since the Metadata answer
            raise Retry(text)
        raise CliError(text)
    producers = [{"producer_id": int(s.producer_id), "producer_epoch": int(s.producer_epoch),
                  "last_sequence": int(s.last_sequence),
                  "last_timestamp_ms": int(s.last_timestamp) if s.last_timestamp >= 0 else None,
                  "coordinator_epoch": int(s.coordinator_epoch),
                  "current_txn_start_offset": int(s.current_txn_start_offset) if s.current_txn_start_offset >= 0
                  else None}
                 for s in sorted(got.active_producers, key=lambda s: s.producer_id)]
    return leader.node_id, producers


# --- rendering ------------------------------------------------------------------------------------
def _time(ms: int | None) -> str | None:
    """Epoch ms -> ``2025-05-01T12:00:00.123Z`` (UTC, no blanks: easy on awk); None -> "-"."""
    if ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _duration(ms: int | None) -> str | None:
    """1234 -> ``1.234s``, 185000 -> ``3m05s``, 7500000 -> ``2h05m``, two days -> ``2d00h``."""
    if ms is None:
        return None
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.3f}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
