"""Reading the partitions a ZooKeeper-coordinated consumer owns: each from its
leader as the partition state znode names it, by Fetch over the Kafka
protocol, from the consumer's position.

A partition whose leader answers that it no longer leads (or cannot be
reached) has its leader looked up again in ZooKeeper, so a leader change is
followed.  A position with no stored offset, or out of the log's range, is
reset to the earliest or latest offset as ``auto_offset_reset`` says.
"""

# kio types request fields with phantom types (i32, i64, BrokerId, TopicName, i32Timedelta...) that
# plain ints, strs and timedeltas satisfy at run time; wrapping each value (i32(x)...) would re-validate
# it on every fetch.
# pyright: reportArgumentType=false

from __future__ import annotations

import datetime
import logging
import time
from operator import attrgetter
from typing import NamedTuple

import numpy as np
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v4.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

from hpbroker.errors import ErrorCode
from hpbroker.kernels import scan_batches
from hpbroker.kernels.batch_scan import STOP_BAD_CRC, STOP_BAD_LENGTH, STOP_BAD_MAGIC
from hpbroker.records import CorruptRecordError, decode_message_set
from hpbroker.records.batch_columns import data_batches, decode_scanned
from hpbroker.sentinels import EARLIEST
from hpbroker.zkconsumer.broker_client import BrokerConnections

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_STOP_NAMES = {STOP_BAD_CRC: "a CRC mismatch", STOP_BAD_LENGTH: "an impossible entry length",
               STOP_BAD_MAGIC: "an unknown magic byte"}
_CORRUPT_STOPS = frozenset(_STOP_NAMES)
_LEADER_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                           ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch,
                           ErrorCode.unknown_leader_epoch, ErrorCode.replica_not_available,
                           ErrorCode.kafka_storage_error})


class Message(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


class PartitionFetcher:
    def __init__(self, registry, connections: BrokerConnections, reset_to: int, max_wait_ms: int,
                 partition_max_bytes: int):
        self.registry = registry
        self.connections = connections
        self.reset_to = reset_to
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.positions: dict[TopicPartition, int | None] = {}  # None: to be reset
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._leaders: dict[TopicPartition, tuple[str, int]] = {}

    def assign(self, positions: dict[TopicPartition, int | None]) -> None:
        """Read these partitions from now on, from these offsets (None: reset)."""
        self.positions = dict(positions)
        self.high_watermarks = {tp: hw for tp, hw in self.high_watermarks.items() if tp in positions}
        self._leaders = {tp: leader for tp, leader in self._leaders.items() if tp in positions}

    def at_end(self) -> bool:
        """Every owned partition has been read up to its high watermark."""
        return all((position := self.positions.get(tp)) is not None and tp in self.high_watermarks
                   and position >= self.high_watermarks[tp] for tp in self.positions)

    def fetch(self, max_wait_s: float) -> list[Message]:
        """One round: a Fetch to every leader at once, their answers decoded.
        Waits up to ``max_wait_s`` when there is nothing to read.  Record data
        that does not decode raises CorruptFetchError once no other partition
        has records to hand out; the partition is not moved past it."""
        started = time.monotonic()
        by_leader = self._ready()
        wait_ms = max(0, min(self.max_wait_ms, int(max_wait_s * 1000)))
        asked = []
        for address, partitions in by_leader.items():
            try:
                connection = self.connections.get(*address)
                connection.send(self._fetch_request(partitions, wait_ms))
                asked.append((address, connection, partitions))
            except ConnectionError as exc:
                self._lost_leader(partitions, exc)
        messages: list[Message] = []
        corrupt: list[CorruptFetchError] = []
        for address, connection, partitions in asked:
            try:
                response = connection.receive(wait_ms / 1000 + connection.timeout_s)
            except ConnectionError as exc:
                self._lost_leader(partitions, exc)
                continue
            for topic in response.responses:
                for data in topic.partitions:
                    try:
                        messages.extend(self._apply((str(topic.topic), int(data.partition_index)), data))
                    except CorruptFetchError as exc:
                        corrupt.append(exc)  # that partition stays where it is
        if corrupt and not messages:
            raise corrupt[0]  # after the other partitions' records were handed out
        if not asked:  # nothing could be asked: do not spin while leaders are being elected
            time.sleep(max(0.0, min(wait_ms / 1000, 0.1) - (time.monotonic() - started)))
        return messages

    def unread(self, messages: list[Message]) -> None:
        """Put fetched records back: each partition's position returns to the
        first of them, so the next fetch hands them out again."""
        for m in messages:
            tp = (m.topic, m.partition)
            if self.positions.get(tp) is not None:
                self.positions[tp] = min(self.positions[tp], m.offset)

    # --- leaders and positions -------------------------------------------------------------------
    def _ready(self) -> dict[tuple[str, int], list[TopicPartition]]:
        """The owned partitions with a known leader and position, by leader address."""
        by_leader: dict[tuple[str, int], list[TopicPartition]] = {}
        to_reset: dict[tuple[str, int], list[TopicPartition]] = {}
        for tp in sorted(self.positions):
            address = self._leaders.get(tp) or self._find_leader(tp)
            if address is None:
                continue
            target = to_reset if self.positions[tp] is None else by_leader
            target.setdefault(address, []).append(tp)
        for address, partitions in to_reset.items():
            self._reset(address, partitions)
            for tp in partitions:
                if self.positions.get(tp) is not None:
                    by_leader.setdefault(address, []).append(tp)
        return by_leader

    def _find_leader(self, tp: TopicPartition) -> tuple[str, int] | None:
        leader = self.registry.leader(*tp)
        if leader is None:
            return None
        self._leaders[tp] = (leader.host, leader.port)
        return self._leaders[tp]

    def _lost_leader(self, partitions: list[TopicPartition], why) -> None:
        log.info("fetching %s: %s; looking up the leader again", _names(partitions), why)
        for tp in partitions:
            self._leaders.pop(tp, None)

    def _reset(self, address: tuple[str, int], partitions: list[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=tuple(
            ListOffsetsTopic(name=t, partitions=tuple(
                ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=self.reset_to)
                for p in ps)) for t, ps in by_topic.items()))
        try:
            response = self.connections.get(*address).request(request)
        except ConnectionError as exc:
            self._lost_leader(partitions, exc)
            return
        for topic in response.topics:
            for row in topic.partitions:
                tp = (str(topic.name), int(row.partition_index))
                if row.error_code == ErrorCode.none and tp in self.positions:
                    self.positions[tp] = int(row.offset)
                    log.info("%s-%d: no committed offset to use, starting at the %s offset %d", tp[0], tp[1],
                             "earliest" if self.reset_to == EARLIEST else "latest", row.offset)
                elif row.error_code in _LEADER_MOVED:
                    self._leaders.pop(tp, None)

    # --- fetch requests and answers --------------------------------------------------------------
    def _fetch_request(self, partitions: list[TopicPartition], wait_ms: int) -> FetchRequest:
        by_topic: dict[str, list[FetchPartition]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=self.positions[(topic, p)],
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=self.partition_max_bytes))
        return FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1,
            max_bytes=max(self.partition_max_bytes * len(partitions), 1 << 20), isolation_level=0,
            session_id=0, session_epoch=-1,
            topics=tuple(FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(), rack_id="")

    def _apply(self, tp: TopicPartition, data) -> list[Message]:
        position = self.positions.get(tp)
        if position is None:
            return []
        error = data.error_code
        if error in _LEADER_MOVED:
            self._lost_leader([tp], f"the broker answered {error.name}")
            return []
        if error == ErrorCode.offset_out_of_range:
            log.warning("%s-%d: offset %d is out of range; resetting to the %s offset", tp[0], tp[1], position,
                        "earliest" if self.reset_to == EARLIEST else "latest")
            self.positions[tp] = None
            return []
        if error != ErrorCode.none:
            log.warning("%s-%d: fetch answered %s", tp[0], tp[1], error.name)
            return []
        self.high_watermarks[tp] = int(data.high_watermark)
        messages, next_position = decode_fetched(tp, bytes(data.records or b""), position)
        self.positions[tp] = next_position
        return messages


def decode_fetched(tp: TopicPartition, data: bytes, position: int) -> tuple[list[Message], int]:
    """The records at or past ``position`` in a fetched chunk, and the position
    after them.  Batches are checked (CRC) and decoded into columns by the
    kernels, so the per-record Python work is building the Message.  A partial
    entry at the end (the byte limit) is left for the next fetch; the entries
    before a corrupt one are handed out, and the next fetch meets it first."""
    view = np.frombuffer(data, np.uint8)
    scan = scan_batches(view)
    if scan.stop in _CORRUPT_STOPS and not len(scan.position):
        raise CorruptFetchError(f"{tp[0]}-{tp[1]}: corrupt record data near offset {position} "
                                f"({_STOP_NAMES[scan.stop]} at byte {scan.valid_end})")
    if not len(scan.position):
        return [], position
    try:
        groups = decode_scanned(view, scan, data_batches(scan))
        messages = [m for group in groups for m in _messages(tp, group, position)]
        messages += _legacy_messages(tp, data, scan, position)
    except CorruptRecordError as exc:
        raise CorruptFetchError(f"{tp[0]}-{tp[1]}: corrupt record data near offset {position}: {exc}") from None
    if len(groups) + bool(np.any(scan.magic < 2)) > 1:  # compressed, plain and legacy entries interleave
        messages.sort(key=attrgetter("offset"))
    # control batches (transaction markers) hold no records but take offsets
    return messages, max(position, int(scan.last_offset[-1]) + 1)


def _messages(tp: TopicPartition, group, position: int) -> list[Message]:
    c = group.columns
    raw = group.buf.tobytes()  # one copy; slicing bytes is what makes each key and value
    topic, partition = tp
    header_columns = (c.header_key_start.tolist(), c.header_key_length.tolist(), c.header_value_start.tolist(),
                      c.header_value_length.tolist())
    out = []
    for offset, timestamp, ks, kl, vs, vl, hf, hc in zip(
            c.offset.tolist(), c.timestamp.tolist(), c.key_start.tolist(), c.key_length.tolist(),
            c.value_start.tolist(), c.value_length.tolist(), c.header_first.tolist(), c.header_count.tolist()):
        if offset < position:
            continue
        headers = () if not hc else _headers(raw, header_columns, hf, hc)
        out.append(Message(topic, partition, offset, raw[ks:ks + kl] if kl >= 0 else None,
                           raw[vs:vs + vl] if vl >= 0 else None, headers, timestamp))
    return out


def _headers(raw: bytes, columns, first: int, count: int) -> tuple[tuple[str, bytes | None], ...]:
    key_start, key_length, value_start, value_length = columns
    return tuple((raw[key_start[i]:key_start[i] + key_length[i]].decode("utf-8", "replace"),
                  raw[value_start[i]:value_start[i] + value_length[i]] if value_length[i] >= 0 else None)
                 for i in range(first, first + count))


def _legacy_messages(tp: TopicPartition, data: bytes, scan, position: int) -> list[Message]:
    """v0/v1 entries (a topic written by old producers): rare, so decoded in Python."""
    out = []
    for i in np.flatnonzero(scan.magic < 2).tolist():
        start = int(scan.position[i])
        for r in decode_message_set(data[start:start + int(scan.size[i])]):
            if r.offset >= position:
                out.append(Message(tp[0], tp[1], r.offset, r.key, r.value, (), r.timestamp))
    return out


class CorruptFetchError(Exception):
    """A leader sent record data that does not decode (or fails its CRC)."""


def _names(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)
