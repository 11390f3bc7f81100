"""What one worker asks another: the owner calls, their results, and their codec.

Every partition and every consumer group has one owning worker (its single
writer).  A request handler on any worker asks the owner with one of the
messages below, in-process when it is the owner itself and over the peer
channel otherwise (``owners.py``); either way the owner answers with the
message's result type.  The set is closed: a peer can send only these types,
each field typed, and the codec (msgspec's MessagePack, each struct an array
tagged with its class name) refuses anything else when it decodes, so nothing
a peer sends is ever executed or trusted beyond its declared shape.

Direction: handler -> owner: a ``Call``; owner -> handler: its result, or
``Failed`` (the owner could not answer: the ErrorCode a client gets, and why).

Messages about a partition carry ``topic`` and ``partition``; those about a
group carry ``group_id``: that is how a call finds its owner.  Each call's
``unanswered(error)`` is its result when no answer comes (the owner is away,
or failed handling it), so a handler always gets its own result type back.
"""

from __future__ import annotations

import uuid
from typing import ClassVar, Union

import msgspec

from hpbroker.errors import ErrorCode
from hpbroker.shared.payload_arena import ArenaRef

_STRUCT = dict(tag=True, array_like=True, frozen=True)


# --- results ------------------------------------------------------------------------------
class AppendResult(msgspec.Struct, **_STRUCT):
    """Produce, one partition: where the batch went, or why it did not."""
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    end_offset: int = -1  # one past the batch's last offset: what acks=all waits for
    replicated: bool = False  # the high watermark was past it already: acks=all has nothing to wait for
    # not appended: a transactional batch that opens its producer's transaction on the
    # partition waits until the coordinator confirms the partition is in it (KIP-890); the
    # guard to send back with the confirmed retry
    verify: int = 0
    # False: the flush.messages fsync of the batch is still to come (a group commit,
    # ``Log.owes_flush``): an acks=1 answer waits for it too
    durable: bool = True


class LocateResult(msgspec.Struct, **_STRUCT):
    """Fetch, one partition: where the whole batches from the fetch offset are.
    ``identity`` is the segment file's (device, inode), so the sender reads the
    very file these positions are in."""
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    path: str | None = None
    position: int = 0
    size: int = 0
    identity: tuple[int, int] | None = None
    # read_committed: (producer id, first offset) of the aborted transactions the range may hold
    aborted: list[tuple[int, int]] | None = None


class ListedOffset(msgspec.Struct, **_STRUCT):
    """ListOffsets, one partition."""
    error: ErrorCode
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


class PartitionBoundsResult(msgspec.Struct, **_STRUCT):
    """A partition's bounds: its log start and high watermark."""
    error: ErrorCode
    log_start_offset: int = -1
    high_watermark: int = -1
    leader_epoch: int = -1


class EpochEndOffset(msgspec.Struct, **_STRUCT):
    """OffsetForLeaderEpoch, one partition."""
    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


class ActiveProducers(msgspec.Struct, **_STRUCT):
    """DescribeProducers, one partition: (producer id, epoch, last sequence, last
    timestamp, coordinator epoch, open transaction's first offset or -1) each."""
    error: ErrorCode
    producers: list[tuple[int, int, int, int, int, int]] = []


class DeletedRecords(msgspec.Struct, **_STRUCT):
    """DeleteRecords, one partition: the log start offset now."""
    error: ErrorCode
    low_watermark: int = -1


class Done(msgspec.Struct, **_STRUCT):
    """An operation whose only answer is its error (ErrorCode.none: done)."""
    error: ErrorCode


class Replicated(msgspec.Struct, **_STRUCT):
    """acks=all: per waited partition, the error (none: the high watermark passed it)."""
    errors: list[ErrorCode]


class DataReady(msgspec.Struct, **_STRUCT):
    """A fetch long poll: whether any waited partition has data now."""
    ready: bool


class Batched(msgspec.Struct, **_STRUCT):
    """The results of a ``Batch``, in its order."""
    results: list[PartitionResult]


class JoinedMember(msgspec.Struct, **_STRUCT):
    member_id: str
    instance_id: str | None
    metadata: bytes


class JoinResult(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinedMember] = []  # for the leader only
    skip_assignment: bool = False


class SyncResult(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class LeftMember(msgspec.Struct, **_STRUCT):
    member_id: str
    instance_id: str | None
    error: ErrorCode


class LeaveResult(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    members: list[LeftMember] = []


class DescribedMember(msgspec.Struct, **_STRUCT):
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupDescription(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedMember] = []


# (topic id, partitions): a consumer group member's assignment, as the wire names it
TopicPartitions = list[tuple[uuid.UUID, list[int]]]


class ConsumerHeartbeatResult(msgspec.Struct, **_STRUCT):
    """ConsumerGroupHeartbeat: the member's epoch and, when it changed (or
    the member sent its whole state), the partitions it may now own."""
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_ms: int = 0
    assignment: TopicPartitions | None = None


class DescribedConsumer(msgspec.Struct, **_STRUCT):
    """One member of a consumer group (ConsumerGroupDescribe); topics as (id, name, partitions)."""
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    topic_names: list[str]
    topic_regex: str | None
    assignment: list[tuple[uuid.UUID, str, list[int]]]
    target: list[tuple[uuid.UUID, str, list[int]]]


class ConsumerGroupDescription(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list[DescribedConsumer] = []


class ListedGroup(msgspec.Struct, **_STRUCT):
    group_id: str
    protocol_type: str
    state: str
    group_type: str


class GroupListing(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    groups: list[ListedGroup] = []


class PartitionError(msgspec.Struct, **_STRUCT):
    """One partition's outcome in a group's offset operation."""
    topic: str
    partition: int
    error: ErrorCode


class CommittedOffsets(msgspec.Struct, **_STRUCT):
    """OffsetCommit or OffsetDelete: the group's error and each partition's."""
    error: ErrorCode
    partitions: list[PartitionError] = []


class FetchedOffset(msgspec.Struct, **_STRUCT):
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


class FetchedOffsets(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    partitions: list[FetchedOffset] = []


class ProducerIdResult(msgspec.Struct, **_STRUCT):
    """InitProducerId with a transactional id."""
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TxnPartitionsResult(msgspec.Struct, **_STRUCT):
    """AddPartitionsToTxn: each partition's error (the transaction's, when it has one)."""
    error: ErrorCode
    partitions: list[PartitionError] = []


class DescribedTxn(msgspec.Struct, **_STRUCT):
    """DescribeTransactions, one transactional id."""
    error: ErrorCode
    transactional_id: str = ""
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: list[tuple[str, int]] = []


class ListedTxn(msgspec.Struct, **_STRUCT):
    transactional_id: str
    producer_id: int
    state: str


class TxnListing(msgspec.Struct, **_STRUCT):
    error: ErrorCode
    transactions: list[ListedTxn] = []


class Failed(msgspec.Struct, **_STRUCT):
    """The owner could not answer: the error a client gets for it, and why."""
    error: ErrorCode
    message: str


PartitionResult = Union[AppendResult, LocateResult, ListedOffset, PartitionBoundsResult, EpochEndOffset,
                        ActiveProducers, DeletedRecords, Done]


# --- calls ------------------------------------------------------------------------------------
class _Call(msgspec.Struct, **_STRUCT):
    """A call, answered by its ``result`` type; ``unanswered(error)`` is that
    result carrying only the error, for when no answer came."""
    result: ClassVar[type]

    def unanswered(self, error: ErrorCode):
        return self.result(error)


# --- calls about a partition ----------------------------------------------------------------
class Append(_Call):
    """Produce to one partition (the owner checks leadership, and min.insync.replicas for acks=all).
    Between workers the records usually travel in the payload arena: ``records``
    is then empty and ``payload`` says where they are (``peers.py``)."""
    topic: str
    partition: int
    records: bytes
    acks: int = 1
    payload: ArenaRef | None = None
    verified: int = 0  # the guard of a transactional batch the coordinator confirmed (``AppendResult.verify``)
    result: ClassVar = AppendResult


class WriteMarker(_Call):
    """A transaction's COMMIT or ABORT marker for one of its partitions, from its
    coordinator; answered where it went (``end_offset``: what a wait for its
    replicas waits for)."""
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    result: ClassVar = AppendResult


class Locate(_Call):
    """A consumer's fetch of one partition: where the batches from ``offset`` are,
    up to the high watermark (read_committed: the last stable offset).  A read,
    and nothing else."""
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    read_committed: bool = False  # up to the last stable offset, with the aborted transactions
    result: ClassVar = LocateResult


class FollowerFetch(_Call):
    """A follower broker's fetch of one partition: it holds everything below
    ``offset`` (the leader records that, for the incarnation ``replica_epoch``),
    and is answered where the batches from there are, up to the log end."""
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int
    replica_id: int
    replica_epoch: int = -1
    log_start_offset: int = -1  # the follower's own, for DeleteRecords waits
    result: ClassVar = LocateResult


class ListOffset(_Call):
    """ListOffsets for one partition: a special timestamp (-1 latest, -2 earliest,
    ...) or the first offset at or after a time."""
    topic: str
    partition: int
    timestamp: int
    current_leader_epoch: int = -1
    read_committed: bool = False  # latest is then the last stable offset
    result: ClassVar = ListedOffset


class PartitionBounds(_Call):
    topic: str
    partition: int
    result: ClassVar = PartitionBoundsResult


class EpochEnd(_Call):
    """OffsetForLeaderEpoch for one partition."""
    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int = -1
    result: ClassVar = EpochEndOffset


class DescribeProducers(_Call):
    """DescribeProducers for one partition: its leader's active producers."""
    topic: str
    partition: int
    result: ClassVar = ActiveProducers


class DeleteRecords(_Call):
    """Move the log start up to ``offset`` (-1: the high watermark), answered once
    every in-sync replica has moved its own (or ``timeout_ms`` passed)."""
    topic: str
    partition: int
    offset: int
    timeout_ms: int = 30000
    result: ClassVar = DeletedRecords


class DeletePartition(_Call):
    """Remove a partition of a deleted topic (standalone), open or not."""
    topic: str
    partition: int
    result: ClassVar = Done


class MovePartition(_Call):
    """Hand a standalone partition to worker ``to``, its only writer of late
    (``partition_moves.py``): Done(none) once the owner let it go, an error
    when it keeps it."""
    topic: str
    partition: int
    to: int
    result: ClassVar = Done


PartitionCall = Union[Append, Locate, FollowerFetch, ListOffset, PartitionBounds, EpochEnd, DescribeProducers,
                      DeleteRecords, DeletePartition, WriteMarker, MovePartition]


class Batch(_Call):
    """Several partition calls for one owner, one round trip; answered ``Batched``."""
    calls: list[PartitionCall]

    def unanswered(self, error: ErrorCode) -> Batched:
        return Batched([call.unanswered(error) for call in self.calls])


class WaitReplicated(_Call):
    """acks=all: wait until each (topic, partition)'s high watermark passes its end offset;
    ``durable_only`` (acks=1): until the leader's flushed offset does (a group commit)."""
    items: list[tuple[str, int, int]]
    timeout_ms: int
    durable_only: bool = False

    def unanswered(self, error: ErrorCode) -> Replicated:
        return Replicated([error] * len(self.items))


class WaitForData(_Call):
    """A fetch long poll: wait until any (topic, partition) has data beyond its
    offset (below the high watermark, unless for a replica)."""
    items: list[tuple[str, int, int]]
    timeout_ms: int
    replica: bool = False

    def unanswered(self, error: ErrorCode) -> DataReady:
        return DataReady(False)  # look again: the partitions' own errors say more


# --- calls about a group --------------------------------------------------------------------
class JoinGroup(_Call):
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    result: ClassVar = JoinResult


class SyncGroup(_Call):
    group_id: str
    generation: int
    member_id: str
    instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: list[tuple[str, bytes]]
    result: ClassVar = SyncResult


class Heartbeat(_Call):
    group_id: str
    generation: int
    member_id: str
    instance_id: str | None = None
    result: ClassVar = Done


class LeaveGroup(_Call):
    group_id: str
    members: list[tuple[str, str | None]]  # (member id, instance id)

    def unanswered(self, error: ErrorCode) -> LeaveResult:
        return LeaveResult(error, [LeftMember(member, instance, error) for member, instance in self.members])


class ConsumerGroupHeartbeat(_Call):
    """A member of a consumer group (KIP-848) joins (epoch 0), heartbeats, or
    leaves (-1; -2 a static member's leave).  None: unchanged since the last."""
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_ms: int
    topic_names: list[str] | None
    topic_regex: str | None
    assignor: str | None
    owned: TopicPartitions | None
    client_id: str
    client_host: str
    result: ClassVar = ConsumerHeartbeatResult


class DescribeConsumerGroup(_Call):
    group_id: str
    result: ClassVar = ConsumerGroupDescription


class DescribeGroup(_Call):
    group_id: str
    result: ClassVar = GroupDescription


class DeleteGroup(_Call):
    group_id: str
    result: ClassVar = Done


class OffsetCommit(_Call):
    group_id: str
    generation: int
    member_id: str
    instance_id: str | None
    partitions: list[tuple[str, int, int, int, str | None]]  # topic, partition, offset, leader epoch, metadata
    api_version: int

    def unanswered(self, error: ErrorCode) -> CommittedOffsets:
        return CommittedOffsets(error, [PartitionError(topic, partition, error) for topic, partition, *_ in
                                        self.partitions])


class OffsetFetch(_Call):
    group_id: str
    topics: list[tuple[str, list[int]]] | None  # None: every committed offset
    require_stable: bool = False

    def unanswered(self, error: ErrorCode) -> FetchedOffsets:
        """Every partition asked about answers the group's error too."""
        return FetchedOffsets(error, [FetchedOffset(topic, p, error=error) for topic, partitions in self.topics or ()
                                      for p in partitions])


class OffsetDelete(_Call):
    group_id: str
    partitions: list[tuple[str, int]]
    result: ClassVar = CommittedOffsets


class TxnOffsetCommit(_Call):
    """Offsets committed inside a transaction: pending until its marker."""
    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    generation: int
    member_id: str
    instance_id: str | None
    partitions: list[tuple[str, int, int, int, str | None]]  # topic, partition, offset, leader epoch, metadata

    def unanswered(self, error: ErrorCode) -> CommittedOffsets:
        return CommittedOffsets(error, [PartitionError(topic, partition, error) for topic, partition, *_ in
                                        self.partitions])


GroupCall = Union[JoinGroup, SyncGroup, Heartbeat, ConsumerGroupHeartbeat, DescribeConsumerGroup, LeaveGroup,
                  DescribeGroup, DeleteGroup, OffsetCommit, OffsetFetch, OffsetDelete, TxnOffsetCommit]


class ListGroups(_Call):
    """The groups one worker coordinates (ListGroups asks every worker)."""
    states: list[str]
    types: list[str]
    result: ClassVar = GroupListing


# --- calls about a transactional id: its coordinator answers -----------------------------------
class InitTxnProducer(_Call):
    """InitProducerId with a transactional id: a producer id and a new epoch,
    fencing the previous instance.  ``producer_id``/``producer_epoch`` are the
    caller's current ones (KIP-360), or -1."""
    transactional_id: str
    timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    result: ClassVar = ProducerIdResult


class AddTxnPartitions(_Call):
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets
    partition); ``verify_only``: only say whether they are in the ongoing
    transaction (a leader's check before a transactional produce)."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]
    verify_only: bool = False

    def unanswered(self, error: ErrorCode) -> TxnPartitionsResult:
        return TxnPartitionsResult(error, [PartitionError(t, p, error) for t, p in self.partitions])


class EndTxn(_Call):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    result: ClassVar = Done


class DescribeTxn(_Call):
    transactional_id: str
    result: ClassVar = DescribedTxn


TxnCall = Union[InitTxnProducer, AddTxnPartitions, EndTxn, DescribeTxn]


class ListTxns(_Call):
    """The transactions one worker coordinates (ListTransactions asks every worker)."""
    states: list[str]
    producer_ids: list[int]
    min_duration_ms: int = -1
    result: ClassVar = TxnListing


Call = Union[PartitionCall, GroupCall, TxnCall, Batch, WaitReplicated, WaitForData, ListGroups, ListTxns]
Result = Union[PartitionResult, Replicated, DataReady, Batched, JoinResult, SyncResult, LeaveResult,
               ConsumerHeartbeatResult, ConsumerGroupDescription, GroupDescription, GroupListing, CommittedOffsets,
               FetchedOffsets, ProducerIdResult, TxnPartitionsResult, DescribedTxn, TxnListing, Failed]
PARTITION_CALLS = PartitionCall.__args__
GROUP_CALLS = GroupCall.__args__
TXN_CALLS = TxnCall.__args__


class OwnerError(Exception):
    """No result came from the owner: the error a client gets for it, and why
    (raised by an ``owners.Owner``; ``Failed`` carries it across the channel)."""

    def __init__(self, error: ErrorCode, why: str):
        super().__init__(why)
        self.error = error


# --- the codec: a frame is one (call id, call) or (call id, result) --------------------------
class ChannelError(Exception):
    """A frame that is not one of the messages above; ``call_id`` when it could still be read."""

    def __init__(self, message: str, call_id: int | None = None):
        super().__init__(message)
        self.call_id = call_id


_encoder = msgspec.msgpack.Encoder()
_envelope = msgspec.msgpack.Decoder(tuple[int, msgspec.Raw])
_call = msgspec.msgpack.Decoder(Call)
_result = msgspec.msgpack.Decoder(Result)


def encode(call_id: int, message) -> bytes:
    return _encoder.encode((call_id, message))


def _decode(frame: bytes, decoder, what: str) -> tuple[int, object]:
    try:
        call_id, body = _envelope.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ChannelError(f"not a framed {what}: {exc}") from None
    try:
        return call_id, decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ChannelError(f"not an owner {what}: {exc}", call_id) from None


def decode_call(frame: bytes) -> tuple[int, object]:
    return _decode(frame, _call, "call")


def decode_result(frame: bytes) -> tuple[int, object]:
    return _decode(frame, _result, "result")
