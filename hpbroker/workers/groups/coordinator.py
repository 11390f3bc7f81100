"""The group coordinator of one worker: the groups whose ``__consumer_offsets``
partition this worker owns, and their committed offsets.

Request handlers on any worker send a whole group operation here as an owner
call (``owner_calls.JoinGroup`` ...) through ``ctx.owners``; each method takes
its call and answers its result type, the same locally and through the
intra-broker channel (``handlers()`` says which method answers which call).
JoinGroup and SyncGroup are coroutines that may wait for a whole rebalance.

Offsets and group metadata are appended to this worker's own partitions of
``__consumer_offsets`` (created on first use, compacted, Kafka's layout) and
cached in memory; the cache is updated after the append.  On start the owned
partitions are replayed in the background; until a partition is loaded its
groups are answered COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hpbroker.clock import now_ms
from hpbroker.errors import ErrorCode
from hpbroker.records import CorruptRecordError, Record, encode_batch
from hpbroker.records.control import parse_control_record
from hpbroker.server.logging_setup import Throttled
from hpbroker.server.ownership import OFFSETS_TOPIC, group_partition
from hpbroker.workers.groups import records as R
from hpbroker.workers.groups.consumer_group import (
    JOIN_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    TopicView,
    unknown_member,
)
from hpbroker.workers.groups.offsets import OffsetStore
from hpbroker.workers.groups.state import COMPLETING, DEAD, EMPTY, Group, GroupConfig
from hpbroker.workers.owner_calls import (
    AddTxnPartitions,
    Append,
    CommittedOffsets,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeat,
    ConsumerHeartbeatResult,
    DeleteGroup,
    DescribeConsumerGroup,
    DescribeGroup,
    Done,
    FetchedOffset,
    FetchedOffsets,
    GroupDescription,
    GroupListing,
    Heartbeat,
    JoinGroup,
    JoinResult,
    LeaveGroup,
    LeaveResult,
    LeftMember,
    ListedGroup,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    PartitionError,
    SyncGroup,
    SyncResult,
    TxnOffsetCommit,
    TxnPartitionsResult,
    WaitReplicated,
)
from hpbroker.workers.partitions import txn_guard, txn_guard_holds
from hpbroker.workers.state_partitions import StatePartitions
from hpbroker.workers.topics import TopicError

log = logging.getLogger(__name__)

# Kafka's: compacted, 100 MiB segments, and compression.type=producer so that a
# broker-wide codec never makes the coordinator recompress its own writes.
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024),
                        "compression.type": "producer"}
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
RETENTION_CHECK_S = 600.0  # offsets.retention.check.interval.ms
COMMIT_TIMEOUT_S = 5.0  # offsets.commit.timeout.ms
CLASSIC, CONSUMER = "classic", "consumer"  # group types, as ListGroups v5 names them


class GroupCoordinator(StatePartitions):
    def __init__(self, partitions, topics, config, index: int, workers: int, leads=None, fenced=None):
        super().__init__(partitions, topics, OFFSETS_TOPIC, config["offsets.topic.num.partitions"], index, workers,
                         leads, fenced)
        self.offsets_partitions = self.partition_count
        self.retention_ms = config["offsets.retention.minutes"] * 60_000
        self.group_config = GroupConfig(config["group.min.session.timeout.ms"], config["group.max.session.timeout.ms"],
                                        config["group.initial.rebalance.delay.ms"])
        self.consumer_config = ConsumerGroupConfig(config["group.consumer.session.timeout.ms"],
                                                   config["group.consumer.heartbeat.interval.ms"],
                                                   config["group.consumer.max.size"])
        self.groups: dict[str, Group | ConsumerGroup] = {}
        self.offsets = OffsetStore()
        self._expiry_timer = None
        self._problems = Throttled(log)  # a full disk fails every join and commit: say so once a minute
        # (AddTxnPartitions) -> its coordinator's answer, wherever it is: TxnOffsetCommit's verification
        # (set by the worker once it can reach coordinators; None: not verified)
        self.verify: Callable[[AddTxnPartitions], Awaitable[TxnPartitionsResult]] | None = None

    # --- topic, ownership, loading ----------------------------------------------------
    async def ensure_offsets_topic(self) -> int:
        """Create ``__consumer_offsets`` if nobody has yet (FindCoordinator asks); 0, or a retriable error."""
        if self.topics.get(OFFSETS_TOPIC) is not None:
            return ErrorCode.none
        try:
            await self.topics.create(OFFSETS_TOPIC, self.offsets_partitions, OFFSETS_TOPIC_CONFIG)
        except TopicError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                self._problems.log(logging.ERROR, "create", "cannot create %s: %s", OFFSETS_TOPIC, exc)
                return ErrorCode.coordinator_not_available
        return ErrorCode.none

    def start(self) -> None:
        """Replay the owned partitions that exist and this broker leads (in the
        background) and arm the expiry timer.  A partition it only follows is
        replayed once it leads it (on first use, after ``leadership_changed``)."""
        self._load_led()
        self._expiry_timer = asyncio.get_running_loop().call_later(RETENTION_CHECK_S, self._expire)

    def _replay(self, p: int):
        """Apply the partition's records in order, yielding after each chunk; then
        install the groups it describes."""
        metadata: dict[str, R.GroupValue | None] = {}
        for batches in self._chunks(p):
            for batch in batches:
                header = batch.header
                if header.is_control:
                    self._replay_marker(batch, p)
                elif header.is_transactional:
                    for record in batch.records:
                        self._apply_pending(header.producer_id, record.key, record.value, record.offset)
                else:
                    for record in batch.records:
                        self._apply(record.key, record.value, metadata, record.offset)
            yield
        for group_id, value in metadata.items():
            if value is not None:
                group = self._new_group(group_id)
                group.restore(value.generation, value.protocol_type, value.protocol, value.leader,
                              value.current_state_timestamp, value.members)
        for group_id in self.offsets.groups():
            if group_id not in self.groups and group_partition(group_id, self.offsets_partitions) == p:
                self._new_group(group_id)  # offsets committed outside group management
        count = sum(1 for g in self.groups if group_partition(g, self.offsets_partitions) == p)
        if count:
            log.info("loaded %s-%d: %d groups", OFFSETS_TOPIC, p, count)

    def _apply(self, key: bytes | None, value: bytes | None, metadata: dict, at: int = -1) -> None:
        if key is None:
            return
        k = R.decode_key(key)
        if isinstance(k, R.OffsetKey):
            if value is None:
                self.offsets.delete(k.group, k.topic, k.partition)
            else:
                self.offsets.put(k.group, k.topic, k.partition, R.decode_offset_value(value), at)
        elif isinstance(k, R.GroupKey):
            metadata[k.group] = None if value is None else R.decode_group_value(value)

    def _apply_pending(self, producer_id: int, key: bytes | None, value: bytes | None, at: int) -> None:
        """An offset a transaction committed: pending until the transaction's marker."""
        if key is None or value is None:
            return
        k = R.decode_key(key)
        if isinstance(k, R.OffsetKey):
            self.offsets.put_pending(producer_id, k.group, k.topic, k.partition, R.decode_offset_value(value), at)

    def _replay_marker(self, batch, p: int) -> None:
        try:
            marker = parse_control_record(batch.records[0])
        except (CorruptRecordError, IndexError) as exc:
            log.warning("%s-%d: an unreadable marker at offset %d: %s", OFFSETS_TOPIC, p, batch.header.base_offset,
                        exc)
            return
        self.offsets.complete(batch.header.producer_id, marker.is_commit, self._in_partition(p))

    def _in_partition(self, p: int):
        return lambda group: group_partition(group, self.offsets_partitions) == p

    def transaction_ended(self, p: int, producer_id: int, commit: bool) -> None:
        """A marker was written to offsets partition ``p``: the offsets the
        producer's transaction committed to its groups take effect, or go.
        While ``p`` is being replayed the replay meets the marker itself, in
        its place in the log: settled now, it would meet a half-read pending set."""
        if p not in self._loading:
            self.offsets.complete(producer_id, commit, self._in_partition(p))

    def _check(self, group_id, allow_empty: bool = False) -> ErrorCode:
        """None-error when this worker coordinates ``group_id`` and has it loaded.
        The empty group id is Kafka's for offsets kept without group management
        (OffsetCommit/OffsetFetch, and DescribeGroups/DeleteGroups to see and
        remove them): ``allow_empty`` there; every other group API needs an id."""
        if group_id is None or (not group_id and not allow_empty):
            return ErrorCode.invalid_group_id
        return self._check_partition(group_partition(group_id, self.offsets_partitions))

    def _group(self, group_id: str, missing: ErrorCode, allow_empty: bool = False) -> tuple[ErrorCode, Group | None]:
        """``_check``'s error, or ``missing`` when no classic group of that id is
        known here; the group.  The classic membership APIs see a group of the
        consumer protocol as none of theirs."""
        error = self._check(group_id, allow_empty)
        group = self.groups.get(group_id)
        if not isinstance(group, Group):
            group = None
        if error == ErrorCode.none and group is None:
            error = missing
        return error, group

    def leadership_changed(self, p: int, leading: bool) -> None:
        """This broker started or stopped leading offsets partition ``p``: its
        groups as cached here are dropped (members waiting in a join are
        answered NOT_COORDINATOR and find the new coordinator); a new leader
        replays the partition on first use."""
        super().leadership_changed(p, leading)
        if leading:
            log.info("coordinating the groups of %s-%d", OFFSETS_TOPIC, p)

    def _forget(self, p: int) -> None:
        for group_id in [g for g in self.groups if group_partition(g, self.offsets_partitions) == p]:
            self.groups.pop(group_id).close(DEAD)
        for group_id in [g for g in self.offsets.groups() if group_partition(g, self.offsets_partitions) == p]:
            self.offsets.drop_group(group_id)
        self.offsets.drop_pending(self._in_partition(p))

    def _new_group(self, group_id: str) -> Group:
        group = Group(group_id, self.group_config, self._persist)
        self.groups[group_id] = group
        return group

    # --- writing records ---------------------------------------------------------------
    def _append(self, group_id: str, pairs: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        return self._append_at(group_id, pairs)[0]

    def _append_at(self, group_id: str, pairs: list[tuple[bytes, bytes | None]]) -> tuple[ErrorCode, int]:
        """(error, the offset just past the records appended)."""
        if not pairs:
            return ErrorCode.none, -1
        ts = now_ms()
        batch = encode_batch([Record(i, ts, k, v) for i, (k, v) in enumerate(pairs)])
        appended = self.partitions.append(Append(OFFSETS_TOPIC, group_partition(group_id, self.offsets_partitions),
                                                 bytearray(batch)))
        error = appended.error
        if error == ErrorCode.none:
            return ErrorCode.none, appended.end_offset
        self._problems.log(logging.WARNING, ("append", error), "appending to %s for group %r failed with error %d",
                           OFFSETS_TOPIC, group_id, error)
        if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
            return ErrorCode.invalid_commit_offset_size, -1
        if error == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator, -1
        return ErrorCode.coordinator_not_available, -1

    async def _replicated(self, group_id: str, end_offset: int) -> ErrorCode:
        """Kafka commits offsets with acks=all: answered once the offsets
        partition's high watermark passed them (at once standalone)."""
        p = group_partition(group_id, self.offsets_partitions)
        error = (await self.partitions.wait_replicated(WaitReplicated([(OFFSETS_TOPIC, p, end_offset)],
                                                                      int(COMMIT_TIMEOUT_S * 1000)))).errors[0]
        if error == ErrorCode.none:
            return ErrorCode.none
        return (ErrorCode.not_coordinator if error == ErrorCode.not_leader_or_follower
                else ErrorCode.coordinator_not_available)

    def _persist(self, group: Group) -> ErrorCode:
        value = R.GroupValue(group.protocol_type or "", group.generation, group.protocol_name, group.leader,
                             group.state_timestamp, tuple(
                                 R.MemberValue(m.member_id, m.instance_id, m.client_id, m.client_host,
                                               m.rebalance_ms, m.session_ms, m.metadata(group.protocol_name),
                                               m.assignment) for m in group.members.values()))
        return self._append(group.group_id, [(R.encode_group_key(group.group_id), R.encode_group_value(value))])

    def _topic_views(self) -> dict[str, TopicView]:
        return {t.name: TopicView(t.topic_id, t.name, t.partitions, t.is_internal) for t in self.topics.all()}

    def handlers(self) -> dict:
        """Call type -> the method answering it (``owners.py`` dispatches on it)."""
        return {JoinGroup: self.join_group, SyncGroup: self.sync_group, Heartbeat: self.heartbeat,
                ConsumerGroupHeartbeat: self.consumer_group_heartbeat,
                DescribeConsumerGroup: self.describe_consumer_group,
                LeaveGroup: self.leave_group, DescribeGroup: self.describe_group, ListGroups: self.list_groups,
                DeleteGroup: self.delete_group, OffsetCommit: self.offset_commit, OffsetFetch: self.offset_fetch,
                OffsetDelete: self.offset_delete, TxnOffsetCommit: self.txn_offset_commit}

    # --- membership ---------------------------------------------------------------------
    async def join_group(self, call: JoinGroup) -> JoinResult:
        error = self._check(call.group_id)
        if error == ErrorCode.none and not (self.group_config.min_session_ms <= call.session_ms
                                    <= self.group_config.max_session_ms):
            error = ErrorCode.invalid_session_timeout
        group = self.groups.get(call.group_id)
        if error == ErrorCode.none and isinstance(group, ConsumerGroup):
            if group.members:  # members of the consumer protocol and of the classic one do not mix here
                error = ErrorCode.inconsistent_group_protocol
            elif call.member_id:
                error = ErrorCode.unknown_member_id
            else:
                self.groups.pop(call.group_id).close(DEAD)  # an empty group becomes a classic one
                group = None
        if error == ErrorCode.none and group is None and call.member_id:
            error = ErrorCode.unknown_member_id
        if error != ErrorCode.none:
            return Group.join_error(error, call.member_id)
        if group is None:
            group = self._new_group(call.group_id)
        assert isinstance(group, Group)
        return await group.join(call.member_id, call.instance_id, call.client_id, call.client_host, call.session_ms,
                                call.rebalance_ms, call.protocol_type, call.protocols, call.require_known_member_id)

    async def sync_group(self, call: SyncGroup) -> SyncResult:
        error, group = self._group(call.group_id, ErrorCode.unknown_member_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        assert group is not None  # _group answers one with no error
        return await group.sync(call.member_id, call.instance_id, call.generation, call.protocol_type,
                                call.protocol_name, call.assignments)

    def heartbeat(self, call: Heartbeat) -> Done:
        error, group = self._group(call.group_id, ErrorCode.unknown_member_id)
        if error != ErrorCode.none:
            return Done(error)
        assert group is not None  # _group answers one with no error
        return Done(group.heartbeat(call.member_id, call.instance_id, call.generation))

    def leave_group(self, call: LeaveGroup) -> LeaveResult:
        error, group = self._group(call.group_id, ErrorCode.unknown_member_id)
        if error != ErrorCode.none:
            return call.unanswered(error)
        assert group is not None  # _group answers one with no error
        return LeaveResult(ErrorCode.none, [LeftMember(m, i, group.leave(m, i)) for m, i in call.members])

    # --- the consumer protocol (KIP-848) -----------------------------------------------------
    def consumer_group_heartbeat(self, call: ConsumerGroupHeartbeat) -> ConsumerHeartbeatResult:
        error = self._check(call.group_id)
        if error != ErrorCode.none:
            return ConsumerHeartbeatResult(error)
        group = self.groups.get(call.group_id)
        if isinstance(group, Group) and group.state != EMPTY:
            return ConsumerHeartbeatResult(ErrorCode.group_id_not_found,
                                           f"group {call.group_id!r} is a classic group with members")
        if not isinstance(group, ConsumerGroup):
            # Kafka would say GROUP_ID_NOT_FOUND, but it never forgets a group: here one that
            # lived only in memory is gone after a restart, and its members must join again
            if call.member_epoch != JOIN_EPOCH:
                return unknown_member(call.group_id, call.member_id)
            if group is not None:
                self.groups.pop(call.group_id).close(DEAD)  # an empty classic group becomes one of this protocol
            group = ConsumerGroup(call.group_id, self.consumer_config, self._topic_views)
            self.groups[call.group_id] = group
        return group.heartbeat(call)

    def describe_consumer_group(self, call: DescribeConsumerGroup) -> ConsumerGroupDescription:
        error = self._check(call.group_id)
        group = self.groups.get(call.group_id)
        if error == ErrorCode.none and not isinstance(group, ConsumerGroup):
            what = "does not exist" if group is None else "is a classic group"
            return ConsumerGroupDescription(ErrorCode.group_id_not_found, f"group {call.group_id!r} {what}")
        if error != ErrorCode.none:
            return ConsumerGroupDescription(error)
        assert isinstance(group, ConsumerGroup)
        return group.describe_consumers()

    # --- administration ---------------------------------------------------------------------
    def describe_group(self, call: DescribeGroup) -> GroupDescription:
        """GROUP_ID_NOT_FOUND when unknown."""
        error = self._check(call.group_id, allow_empty=True)
        group = self.groups.get(call.group_id)
        if error == ErrorCode.none and group is None:
            error = ErrorCode.group_id_not_found
        if error != ErrorCode.none:
            return GroupDescription(error, DEAD.value)
        assert group is not None
        return group.describe()

    def list_groups(self, call: ListGroups) -> GroupListing:
        """The loaded groups of this worker, filtered by state and type."""
        wanted_states = {s.lower() for s in call.states or ()}
        wanted_types = {t.lower() for t in call.types or ()}
        rows = []
        for gid, g in self.groups.items():
            kind, state = (CONSUMER, g.state_name) if isinstance(g, ConsumerGroup) else (CLASSIC, g.state.value)
            if (not wanted_states or state.lower() in wanted_states) and (not wanted_types or kind in wanted_types):
                rows.append(ListedGroup(gid, g.protocol_type or "", state, kind))
        return GroupListing(ErrorCode.coordinator_load_in_progress if self._loading else ErrorCode.none, rows)

    def delete_group(self, call: DeleteGroup) -> Done:
        error = self._check(call.group_id, allow_empty=True)
        group = self.groups.get(call.group_id)
        if error != ErrorCode.none:
            return Done(error)
        if group is None or group.state == DEAD:
            return Done(ErrorCode.group_id_not_found)
        if group.state != EMPTY:
            return Done(ErrorCode.non_empty_group)
        return Done(self._remove_group(group))

    def _remove_group(self, group: Group | ConsumerGroup) -> ErrorCode:
        gid = group.group_id
        pairs: list[tuple[bytes, bytes | None]] = [(R.encode_offset_key(gid, t, p), None)
                                                   for t, p in self.offsets.of_group(gid)]
        pairs.append((R.encode_group_key(gid), None))
        error = self._append(gid, pairs)
        if error == ErrorCode.none:
            self.offsets.drop_group(gid)
            group.close(DEAD)
            del self.groups[gid]
        return error

    # --- offsets --------------------------------------------------------------------------
    async def offset_commit(self, call: OffsetCommit) -> CommittedOffsets:
        group_id = call.group_id
        error = self._check(group_id, allow_empty=True)
        group = self.groups.get(group_id)
        if error == ErrorCode.none:
            error = self._commit_allowed(group, call.generation, call.member_id, call.instance_id, call.api_version)
        if error != ErrorCode.none:
            return call.unanswered(error)
        if group is None:
            group = self._new_group(group_id)  # a "simple" group: offsets without membership
        results, values = _offset_values(call.partitions, now_ms())
        pairs: list[tuple[bytes, bytes | None]] = [(R.encode_offset_key(group_id, t, p), R.encode_offset_value(v))
                                                   for t, p, v in values]
        error, end_offset = self._append_at(group_id, pairs)
        if error == ErrorCode.none and pairs:
            error = await self._replicated(group_id, end_offset)
        if error != ErrorCode.none:
            return CommittedOffsets(ErrorCode.none, [
                PartitionError(r.topic, r.partition, error if r.error == ErrorCode.none else r.error)
                for r in results])
        first = end_offset - len(values)  # the records went in at these offsets, in order
        for i, (topic, partition, value) in enumerate(values):
            self.offsets.put(group_id, topic, partition, value, first + i)
        group.touch(call.member_id)
        return CommittedOffsets(ErrorCode.none, results)

    async def txn_offset_commit(self, call: TxnOffsetCommit) -> CommittedOffsets:
        """Offsets committed inside a transaction (``send_offsets_to_transaction``):
        appended as the producer's transactional batch, and pending until the
        transaction's marker reaches this offsets partition.  A member id and
        generation, when given (KIP-447), must be the group's current ones."""
        group_id = call.group_id
        error = self._check(group_id)
        group = self.groups.get(group_id)
        if error == ErrorCode.none and group is not None and call.generation >= 0:
            error = group.check_member(call.member_id, call.instance_id, call.generation)
        if error == ErrorCode.none:
            error = await self._verified(call)
        if error != ErrorCode.none:
            return call.unanswered(error)
        ts = now_ms()
        results, values = _offset_values(call.partitions, ts)
        records = [Record(i, ts, R.encode_offset_key(group_id, t, p), R.encode_offset_value(v))
                   for i, (t, p, v) in enumerate(values)]
        if records:
            batch = encode_batch(records, producer_id=call.producer_id, producer_epoch=call.producer_epoch,
                                 transactional=True)
            p = group_partition(group_id, self.offsets_partitions)
            appended = self.partitions.append_local(OFFSETS_TOPIC, p, bytearray(batch))
            error = appended.error
            if error == ErrorCode.none:
                # pending from the moment they are in the log, as a replay would find them: a
                # marker that comes while the replicas catch up settles them like any other
                first = appended.end_offset - len(values)
                for i, (topic, partition, value) in enumerate(values):
                    self.offsets.put_pending(call.producer_id, group_id, topic, partition, value, first + i)
                error = await self._replicated(group_id, appended.end_offset)
            elif error == ErrorCode.not_leader_or_follower:
                error = ErrorCode.not_coordinator
            elif error not in (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state):
                self._problems.log(logging.WARNING, ("txn append", error), "appending transactional offsets to %s "
                                   "for group %r failed with error %d", OFFSETS_TOPIC, group_id, error)
                error = ErrorCode.coordinator_not_available
            if error != ErrorCode.none:
                return call.unanswered(error)
        return CommittedOffsets(ErrorCode.none, results)

    async def _verified(self, call: TxnOffsetCommit) -> ErrorCode:
        """KIP-890, as for a produce: unless the producer's transaction is open
        on the offsets partition already, its coordinator must confirm that the
        partition is in it, and no marker may come in between; otherwise a
        late or stray commit would stay pending for good."""
        p = group_partition(call.group_id, self.offsets_partitions)
        found = self.partitions.resolve(OFFSETS_TOPIC, p)
        if self.verify is None or isinstance(found, ErrorCode):
            return ErrorCode.none  # the append answers for a partition that is not here
        token = txn_guard(found, call.producer_id, call.producer_epoch)
        if token is None:
            return ErrorCode.none
        verdict = await self.verify(AddTxnPartitions(call.transactional_id, call.producer_id, call.producer_epoch,
                                                     [(OFFSETS_TOPIC, p)], verify_only=True))
        error = verdict.error if verdict.error != ErrorCode.none else verdict.partitions[0].error
        if error in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                     ErrorCode.concurrent_transactions):
            return ErrorCode.coordinator_load_in_progress  # retried in place by every client
        if error == ErrorCode.none and not txn_guard_holds(found, call.producer_id, call.producer_epoch, token):
            return ErrorCode.invalid_txn_state  # its transaction ended while the coordinator was asked
        return error

    @staticmethod
    def _commit_allowed(group, generation, member_id, instance_id, api_version) -> ErrorCode:
        if group is None:
            if generation < 0:
                return ErrorCode.none
            return ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
        if group.state == DEAD:
            return ErrorCode.coordinator_not_available
        if isinstance(group, ConsumerGroup):
            return group.commit_error(member_id, generation, api_version)
        if generation < 0 and group.state == EMPTY:
            return ErrorCode.none  # a standalone commit (no group membership)
        error = group.check_member(member_id, instance_id, generation)
        if error != ErrorCode.none:
            return error
        return ErrorCode.rebalance_in_progress if group.state == COMPLETING else ErrorCode.none

    def offset_fetch(self, call: OffsetFetch) -> FetchedOffsets:
        """Every committed offset of the group, or those asked about (-1 when none).
        With ``require_stable`` (KIP-447), a partition whose offset a
        transaction committed and has not ended yet answers
        UNSTABLE_OFFSET_COMMIT, which clients retry."""
        group_id = call.group_id
        error = self._check(group_id, allow_empty=True)
        if error != ErrorCode.none:
            return call.unanswered(error)
        if call.topics is None:
            items = sorted(self.offsets.of_group(group_id).items())
            return FetchedOffsets(ErrorCode.none, [
                FetchedOffset(t, p, error=ErrorCode.unstable_offset_commit)
                if call.require_stable and self.offsets.is_pending(group_id, t, p)
                else FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata) for (t, p), v in items])
        rows = []
        for topic, partitions in call.topics:
            for p in partitions:
                v = self.offsets.get(group_id, topic, p)
                if call.require_stable and self.offsets.is_pending(group_id, topic, p):
                    rows.append(FetchedOffset(topic, p, error=ErrorCode.unstable_offset_commit))
                else:
                    rows.append(FetchedOffset(topic, p) if v is None else
                                FetchedOffset(topic, p, v.offset, v.leader_epoch, v.metadata))
        return FetchedOffsets(ErrorCode.none, rows)

    def offset_delete(self, call: OffsetDelete) -> CommittedOffsets:
        group_id = call.group_id
        error = self._check(group_id)
        group = self.groups.get(group_id)
        if error == ErrorCode.none and (group is None or group.state == DEAD):
            error = ErrorCode.group_id_not_found
        subscribed: set[str] = set()
        if error == ErrorCode.none and group is not None and group.state != EMPTY:
            found = group.subscribed_topics()
            if found is None:
                error = ErrorCode.non_empty_group
            else:
                subscribed = found
        if error != ErrorCode.none:
            return CommittedOffsets(error)
        results, pairs, doomed = [], [], []
        for topic, partition in call.partitions:
            if topic in subscribed:
                results.append(PartitionError(topic, partition, ErrorCode.group_subscribed_to_topic))
                continue
            if self.offsets.get(group_id, topic, partition) is not None:
                pairs.append((R.encode_offset_key(group_id, topic, partition), None))
                doomed.append((topic, partition))
            results.append(PartitionError(topic, partition, ErrorCode.none))
        error = self._append(group_id, pairs)
        if error != ErrorCode.none:
            return CommittedOffsets(error)
        for topic, partition in doomed:
            self.offsets.delete(group_id, topic, partition)
        return CommittedOffsets(ErrorCode.none, results)

    # --- expiry and shutdown -------------------------------------------------------------
    def _expire(self) -> None:
        try:
            self.expire_offsets(now_ms())
        except Exception:
            log.exception("offset expiry failed")
        self._expiry_timer = asyncio.get_running_loop().call_later(RETENTION_CHECK_S, self._expire)

    def expire_offsets(self, now: int) -> int:
        """Delete expired offsets (tombstones), then empty groups left without offsets."""
        removed = 0
        for group in list(self.groups.values()):
            if group_partition(group.group_id, self.offsets_partitions) not in self._loaded:
                continue
            gid = group.group_id
            if group.state == EMPTY:
                empty_since, keep = (group.state_timestamp if group.protocol_type else None), set()
            else:
                empty_since, keep = None, group.subscribed_topics()
            doomed = self.offsets.expired(gid, now, self.retention_ms, empty_since=empty_since, keep_topics=keep)
            if doomed and self._append(gid, [(R.encode_offset_key(gid, t, p), None)
                                             for t, p in doomed]) == ErrorCode.none:
                for t, p in doomed:
                    self.offsets.delete(gid, t, p)
                removed += len(doomed)
            if group.state == EMPTY and not self.offsets.of_group(gid):
                self._remove_group(group)
        return removed

    def close(self) -> None:
        """Stopping: answer every waiting JoinGroup/SyncGroup now (NOT_COORDINATOR) so
        in-flight requests finish, and refuse new ones."""
        self._closed = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        for group in self.groups.values():
            group.close(DEAD)


def _offset_values(partitions, ts: int) -> tuple[list[PartitionError], list[tuple[str, int, R.OffsetValue]]]:
    """An offset commit's ``(topic, partition, offset, leader epoch, metadata)``
    rows: each one's outcome, and the values to write for those that may be."""
    results, values = [], []
    for topic, partition, offset, epoch, metadata in partitions:
        metadata = metadata or ""
        if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
            results.append(PartitionError(topic, partition, ErrorCode.offset_metadata_too_large))
            continue
        values.append((topic, partition, R.OffsetValue(offset, epoch, metadata, ts)))
        results.append(PartitionError(topic, partition, ErrorCode.none))
    return results, values
