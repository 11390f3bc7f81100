"""The follower's side: fetch from the leader, append at the leader's offsets.

One ``ReplicaFetcher`` per leader broker serves every partition this worker
follows from it, in one Fetch request (v15: the replica state names this
broker and its broker epoch, so the leader counts only what this incarnation
fetched; topics by id), as Kafka's fetcher threads do.  A partition first truncates: it asks the leader
(OffsetForLeaderEpoch) where its own latest leader epoch ends there, and cuts
its log at that point, so a tail the leader never had (written by a leader
that lost its place before the followers copied it) is gone before anything
new is appended after it.  Then it fetches from its log end on.

The partition's log is reached through ``FollowerLog``: its end and epochs,
``append_as_follower`` (the leader's offsets and epochs kept),
``truncate_to``, and the high watermark and log start the leader reports.
"""

# kio types request fields with phantom types (i32, i64, BrokerId, TopicName, i32Timedelta...) that
# plain ints, strs and timedeltas satisfy at run time; wrapping each value (i32(x)...) would re-validate
# it on every fetch.
# pyright: reportArgumentType=false

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Protocol

from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from hpbroker.errors import ErrorCode
from hpbroker.replication.client import ClientConnection
from hpbroker.replication.fetch_request import ReplicaFetch
from hpbroker.replication.fetch_response import PartitionAnswer
from hpbroker.sentinels import UNDEFINED_EPOCH as UNDEFINED
from hpbroker.storage.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)

# Errors that mean "the leader is not who we think": wait for the next role change.
_NOT_OUR_LEADER = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                   ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition}
MAX_TRUNCATION_ROUNDS = 8


class FollowerLog(Protocol):
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epochs: list[tuple[int, int]]

    def end_offset_for_epoch(self, requested: int, current_epoch: int) -> tuple[int, int]: ...
    def append_as_follower(self, records: bytes | memoryview) -> int: ...
    def truncate_to(self, offset: int) -> None: ...
    def follow_leader_log_start(self, leader_log_start: int) -> int: ...


@dataclass(frozen=True)
class FetcherSettings:
    broker_id: int
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 << 20  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1 << 20  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms


@dataclass
class Followed:
    topic: str
    partition: int
    leader_epoch: int
    log: FollowerLog
    topic_id: uuid.UUID
    truncated: bool = False  # done once per leader epoch
    stalled_until: float = 0.0  # the leader disowned it: ask again after a back-off (or a role change)

    @property
    def stalled(self) -> bool:
        return self.stalled_until > time.monotonic()


def last_epoch(partition_log: FollowerLog) -> int:
    epochs = partition_log.leader_epochs
    return epochs[-1][0] if epochs else UNDEFINED


class ReplicaFetcher:
    def __init__(self, settings: FetcherSettings, leader_id: int, host: str, port: int,
                 broker_epoch: Callable[[], int] = lambda: -1):
        self.settings = settings
        self.broker_epoch = broker_epoch  # this broker's registration, as its image knows it now
        self.leader_id = leader_id
        self.address = (host, port)
        self.partitions: dict[tuple[str, int], Followed] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False
        self._connection: ClientConnection | None = None
        self.on_progress = lambda topic, partition: None  # new data or high watermark: wake waiters

    # --- what to follow ------------------------------------------------------------------
    def follow(self, topic: str, partition: int, leader_epoch: int, partition_log: FollowerLog,
               topic_id: uuid.UUID) -> None:
        current = self.partitions.get((topic, partition))
        if current is None or current.leader_epoch != leader_epoch or current.log is not partition_log:
            self.partitions[(topic, partition)] = Followed(topic, partition, leader_epoch, partition_log, topic_id)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def unfollow(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)
        self._changed.set()

    async def close(self) -> None:
        # the flag, not only the cancel: Python 3.11's wait_for can swallow a
        # cancel that lands as the event it waits on is set, and the loop
        # would then wait forever
        self._closed = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._connection is not None:
            self._connection.close()

    # --- the loop --------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            active = [f for f in self.partitions.values() if not f.stalled]
            if not active:
                # the leader may learn of its role after us: ask again after the back-off
                wake = min((f.stalled_until for f in self.partitions.values()), default=None)
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(),
                                           None if wake is None else max(0.0, wake - time.monotonic()))
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                connection = await self._connect()
                pending = [f for f in active if not f.truncated]
                if pending:
                    await self._truncate(connection, pending)
                ready = [f for f in active if f.truncated and not f.stalled]
                if ready:
                    await self._fetch(connection, ready)
                else:  # the leader could not answer for any yet: do not ask again at once
                    await self._backoff()
            except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
                log.warning("fetching from broker %d at %s:%d failed: %s", self.leader_id, *self.address, exc)
                self._drop_connection()
                await self._backoff()
            except Exception:
                log.exception("replica fetcher for broker %d failed", self.leader_id)
                self._drop_connection()
                await self._backoff()

    async def _connect(self) -> ClientConnection:
        if self._connection is None or self._connection.closed:
            self._connection = await ClientConnection.open(
                *self.address, client_id=f"broker-{self.settings.broker_id}-fetcher-{self.leader_id}")
        return self._connection

    def _stall(self, followed: Followed) -> None:
        followed.stalled_until = time.monotonic() + self.settings.backoff_ms / 1000
        followed.truncated = False  # whoever leads next, find the common point with it first

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _backoff(self) -> None:
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), self.settings.backoff_ms / 1000)
        except asyncio.TimeoutError:
            pass

    # --- truncation by leader epoch -----------------------------------------------------------
    async def _truncate(self, connection: ClientConnection, pending: list[Followed]) -> None:
        asking = {(f.topic, f.partition): last_epoch(f.log) for f in pending}
        for _round in range(MAX_TRUNCATION_ROUNDS):
            if not asking:
                return
            answers = await self._epoch_ends(connection, asking)
            next_round = {}
            for key, epoch in asking.items():
                followed = self.partitions.get(key)
                answer = answers.get(key)
                if followed is None or answer is None:
                    continue
                error, leader_epoch, leader_end = answer
                if error in _NOT_OUR_LEADER:
                    self._stall(followed)
                    continue
                if error != ErrorCode.none:
                    continue  # retried with the next round of the loop
                again = self._truncation_point(followed, epoch, leader_epoch, leader_end)
                if again is not None:
                    next_round[key] = again
            asking = next_round

    def _truncation_point(self, followed: Followed, asked: int, leader_epoch: int, leader_end: int) -> int | None:
        """Cut the log where it stops agreeing with the leader; an epoch to ask
        about next when one round cannot tell (KIP-279), else None."""
        partition_log = followed.log
        if asked == UNDEFINED or leader_end == UNDEFINED:
            # no epochs to compare (an empty log, one from before epochs, or an
            # epoch the leader never knew): the high watermark is the last
            # point both are known to share
            self._cut(followed, min(partition_log.high_watermark, partition_log.log_end_offset))
            return None
        mine_epoch, mine_end = partition_log.end_offset_for_epoch(leader_epoch, UNDEFINED)
        safe = min(leader_end, mine_end if mine_end >= 0 else partition_log.log_end_offset)
        if leader_epoch == asked or mine_epoch == leader_epoch:
            self._cut(followed, safe)
            return None
        # this log has no epoch ``leader_epoch``: cut to what is safe, then ask
        # about the epoch of ours before it
        self._cut(followed, safe, done=mine_epoch == UNDEFINED)
        return mine_epoch if mine_epoch != UNDEFINED else None

    def _cut(self, followed: Followed, offset: int, done: bool = True) -> None:
        if offset < followed.log.log_end_offset:
            log.info("%s-%d: truncating from %d to %d to match leader %d (epoch %d)", followed.topic,
                     followed.partition, followed.log.log_end_offset, offset, self.leader_id, followed.leader_epoch)
            followed.log.truncate_to(offset)
        followed.truncated = followed.truncated or done

    async def _epoch_ends(self, connection: ClientConnection, asking: dict) -> dict:
        by_topic: dict[str, list] = {}
        for (topic, partition), epoch in asking.items():
            current = self.partitions[(topic, partition)].leader_epoch
            by_topic.setdefault(topic, []).append(OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=current, leader_epoch=max(epoch, 0)))
        request = OffsetForLeaderEpochRequest(replica_id=self.settings.broker_id, topics=tuple(
            OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        response = await connection.send(request)
        found = {}
        for topic in response.topics:
            for p in topic.partitions:
                found[(topic.topic, p.partition)] = (p.error_code, p.leader_epoch, p.end_offset)
        return found

    # --- fetching ---------------------------------------------------------------------------------
    async def _fetch(self, connection: ClientConnection, ready: list[Followed]) -> None:
        by_topic: dict[uuid.UUID, list] = {}
        for f in ready:
            by_topic.setdefault(f.topic_id, []).append((
                f.partition, f.leader_epoch, f.log.log_end_offset, last_epoch(f.log), f.log.log_start_offset,
                self.settings.partition_max_bytes))
        request = ReplicaFetch(self.settings.broker_id, self.broker_epoch(), self.settings.max_wait_ms,
                               self.settings.min_bytes, self.settings.max_bytes, list(by_topic.items()))
        response = await connection.send(request, timeout=self.settings.max_wait_ms / 1000 + 30)
        if response.error_code != ErrorCode.none:
            raise ConnectionError(f"fetch answered {response.error_code.name}")
        asked = {(f.topic_id, f.partition): f for f in ready}
        for topic in response.responses:
            for data in topic.partitions:
                followed = asked.get((topic.topic_id, data.partition_index))
                if followed is not None and self.partitions.get((followed.topic, followed.partition)) is followed:
                    self._apply(followed, data)

    def _apply(self, followed: Followed, data: PartitionAnswer) -> None:
        error = data.error_code
        if error in _NOT_OUR_LEADER:
            self._stall(followed)
            return
        if error == ErrorCode.offset_out_of_range:
            followed.truncated = False  # find the common point again
            return
        if error != ErrorCode.none:
            log.warning("%s-%d: leader %d answered %s", followed.topic, followed.partition, self.leader_id, error.name)
            return
        if data.diverging_epoch >= 0:
            followed.truncated = False
            return
        partition_log = followed.log
        if data.records:
            try:
                partition_log.append_as_follower(data.records)
            except OffsetOutOfRangeError:
                # the leader's batch starts before this log's end: the log ends
                # inside a batch the leader has, so its tail differs; find the
                # common point again
                followed.truncated = False
                return
        # as Kafka's followers: the leader's high watermark, capped by what this
        # log holds; set even when unchanged, so the log keeps its own from now on
        high_watermark = min(data.high_watermark, partition_log.log_end_offset)
        moved = bool(data.records) or high_watermark != partition_log.high_watermark
        partition_log.high_watermark = high_watermark
        if data.log_start_offset > partition_log.log_start_offset:
            # what the leader deleted (retention, DeleteRecords) goes here too; the
            # leader's DeleteRecords waits for this replica's next fetch to say so
            partition_log.follow_leader_log_start(data.log_start_offset)
        if moved:
            self.on_progress(followed.topic, followed.partition)
