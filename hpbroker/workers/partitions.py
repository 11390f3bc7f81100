"""The partitions one worker owns (it is their single writer), and its answers to
the partition calls of ``owner_calls``: from its own handlers and from other
workers alike (``owners.py``).

Every call starts with ``resolve(topic, partition) -> Partition | ErrorCode``
(Kafka's ``getPartitionOrError``): standalone, the partition's log is opened on
first use and it leads for good; in a cluster, the ``ReplicaManager`` gives
each partition assigned here its role, and one not assigned here is another
broker's (NOT_LEADER_OR_FOLLOWER).  Then the partition's own guard
(``Partition.leader_error``), then the operation.

Reads return where the batches are (segment path, position, size) rather than
the bytes: the worker that holds the client's socket sends them with
``sendfile`` itself, so bytes never cross the channel on the read path.

Waits (a fetch long poll, acks=all, DeleteRecords until the followers caught
up) are delayed operations in the worker's ``Purgatory``, poked by whatever
changes a partition.  While this worker's leaderships are in doubt (an
expired session, a noticed pause: confirmed within a ZooKeeper round trip or
two) calls wait for the answer rather than fail: a refusal would split a
producer's pipelined requests, the first refused and the next out of sequence.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec.structs

from hpbroker.clock import now_ms
from hpbroker.errors import ErrorCode
from hpbroker.records.batch import first_is_transactional, first_producer
from hpbroker.records.control import ABORT, COMMIT, encode_control_batch
from hpbroker.server.logging_setup import Throttled
from hpbroker.server.ownership import partition_owner
from hpbroker.shared.partition_moves import Move, MovesWriter
from hpbroker.storage import LogManager, StorageError, filenames
from hpbroker.storage.log import ORIGIN_COORDINATOR
from hpbroker.workers import eager, observe
from hpbroker.workers.owner_calls import (
    ActiveProducers,
    Append,
    AppendResult,
    Batch,
    Batched,
    DataReady,
    DeletedRecords,
    DeletePartition,
    DeleteRecords,
    DescribeProducers,
    Done,
    EpochEnd,
    FollowerFetch,
    ListOffset,
    Locate,
    MovePartition,
    PartitionBounds,
    Replicated,
    WaitForData,
    WaitReplicated,
    WriteMarker,
)
from hpbroker.workers.partition import Partition, Role
from hpbroker.workers.partition_moves import AppendSources, Placement, movable_topic
from hpbroker.workers.publisher import UNPUBLISHED
from hpbroker.workers.purgatory import Purgatory
from hpbroker.workers.topics import TopicRegistry

if TYPE_CHECKING:
    from hpbroker.shared.payload_arena import ArenaReceiver
    from hpbroker.workers.cluster_topics import ClusterTopics

log = logging.getLogger(__name__)
_flush_failures = Throttled(log)  # a failing disk fails every group commit until it is back


class Partitions:
    def __init__(self, logs: LogManager, topics: TopicRegistry | ClusterTopics, *, replicas=None,
                 purgatory: Purgatory | None = None, publisher=UNPUBLISHED, payloads: ArenaReceiver | None = None,
                 placement: Placement | None = None, index: int = 0, moves: MovesWriter | None = None):
        self.logs = logs
        self.topics = topics
        self.payloads = payloads  # another worker's produce names its records in the payload arena
        self.purgatory = purgatory or Purgatory()
        self.publisher = publisher  # the shared partition table (cluster mode: the ReplicaManager's too)
        # cluster mode: the ReplicaManager, which gives the partitions assigned here their roles
        self.replicas = replicas
        self._standalone: dict[tuple[str, int], Partition] = {}
        self._owing_flush: list = []  # logs with group-committed writes for this turn's fsync
        # (topic, partition, producer id, commit) -> None, after a marker is written: the
        # group coordinator settles the offsets a transaction committed on an offsets partition
        self.on_marker: Callable[[str, int, int, bool], None] | None = None
        self._configs_generation = topics.generation
        # standalone partitions may move between workers (partition_moves.py): where each is, this
        # worker's index, its side of the shared map of moves, and who appended to what of late
        self.placement = placement if placement is not None and placement.moves is not None else None
        self.moved = None if self.placement is None else self.placement.moves
        self.index = index
        self.moves = moves
        self.sources = AppendSources()
        self._handlers = {Append: self.produce, Locate: self.locate, FollowerFetch: self.follower_fetch,
                          ListOffset: self.list_offset, PartitionBounds: self.bounds, EpochEnd: self.epoch_end,
                          DescribeProducers: self.describe_producers, DeleteRecords: self.delete_records,
                          DeletePartition: self.delete_partition, WriteMarker: self.write_marker, Batch: self.batch,
                          WaitReplicated: self.wait_replicated, WaitForData: self.wait_for_data,
                          MovePartition: self.move_partition}

    # --- the registry -------------------------------------------------------------------
    def resolve(self, topic: str, partition: int) -> Partition | ErrorCode:
        """The partition as this worker holds it, or why there is none here."""
        if self.replicas is not None:
            found = self.replicas.partitions.get((topic, partition))
            if found is not None:
                return found
            # no replica here: a partition of a known topic is another broker's
            return (ErrorCode.not_leader_or_follower if self.topics.get(topic) is not None
                    else ErrorCode.unknown_topic_or_partition)
        if (self.moved is not None and self.moved.any()  # until a first move, the hash decides, as routing did
                and self.placement is not None and self.placement.owner(topic, partition) != self.index):
            return ErrorCode.not_leader_or_follower  # it moved to another worker (or was never here)
        partition_log = self._standalone_log(topic, partition)
        if partition_log is None:
            self._standalone.pop((topic, partition), None)
            return ErrorCode.unknown_topic_or_partition
        found = self._standalone.get((topic, partition))
        if found is None or found.log is not partition_log:
            found = self._standalone[(topic, partition)] = Partition(topic, partition, partition_log,
                                                                     publisher=self.publisher)
        return found

    def _standalone_log(self, topic: str, partition: int):
        """The partition's open log (opened on first use), or None when it does not exist."""
        found = self.logs.get_log(topic, partition)
        if found is not None:
            return found
        if self.moved is not None:
            move = self.moved.move(topic, partition)
            if move is not None:  # handed here by the worker that had it: opened where that one left it
                return self.logs.adopt_log(topic, partition, move.recovery_point, move.log_start)
        # Topics are created with all their partition directories, so one that
        # is missing belongs to a topic being deleted (perhaps through another
        # worker, partition by partition): never bring it back by opening it.
        name = filenames.partition_dir_name(topic, partition)
        if not any(os.path.isdir(os.path.join(d, name)) for d in self.logs.log_dirs):
            return None
        info = self.topics.get(topic, partition)
        if info is None or not 0 <= partition < info.partitions:
            return None
        return self.logs.get_or_create_log(topic, partition, topic_id=info.topic_id)

    def log_of(self, topic: str, partition: int):
        """The partition's log here, whatever its role (None when there is none)."""
        found = self.resolve(topic, partition)
        return None if isinstance(found, ErrorCode) else found.log

    def leads(self, topic: str, partition: int) -> bool:
        found = self.resolve(topic, partition)
        return not isinstance(found, ErrorCode) and found.leads()

    def in_doubt(self, topic: str, partition: int) -> bool:
        found = self.resolve(topic, partition)
        return not isinstance(found, ErrorCode) and found.in_doubt()

    def _leading(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition | ErrorCode:
        """The partition, if it may be served here as by its leader; else the error."""
        found = self.resolve(topic, partition)
        if isinstance(found, ErrorCode):
            return found
        return found.leader_error(current_leader_epoch) or found

    def changed(self, partition: Partition) -> None:
        """Something of ``partition`` moved (data, the high watermark, a follower's
        position, its role): the delayed operations on it look again, and the
        other workers read its new state."""
        partition.publish()
        self.purgatory.poke(partition.key)

    # --- the calls ---------------------------------------------------------------------------
    def handlers(self) -> dict:
        """Call type -> the method answering it (``owners.py`` dispatches on it)."""
        return dict(self._handlers)

    async def batch(self, call: Batch) -> Batched:
        """Several partitions' calls in one round trip, once this worker's
        leaderships are not in doubt (or it waited long enough)."""
        if self.replicas is not None and not self.replicas.trusted():  # nearly always trusted: no coroutine made
            await self.replicas.settled()
        results = []
        for one in call.calls:
            result = self._handlers[type(one)](one)
            results.append(await result if hasattr(result, "__await__") else result)
        return Batched(results)

    def produce(self, call: Append) -> AppendResult:
        """A client's produce (the owner call every Produce request makes): its
        ``flush.messages`` fsync is a group commit, shared with the turn's
        other produces (``group_flushes_on``), which its answer waits for."""
        return self.append(call, group_commit=True)

    def append(self, call: Append, group_commit: bool = False) -> AppendResult:
        """An append for this worker's own use (a coordinator's records): its
        ``flush.messages`` fsync is done before it returns, as the coordinator
        acts on what it wrote at once."""
        found = self._leading(call.topic, call.partition)
        if isinstance(found, ErrorCode):
            return AppendResult(found)
        if self.placement is not None:
            self.sources.saw(found.key)
        records = call.records
        unchanged = None
        if call.payload is not None and self.payloads is not None:
            # a view of the sender's slot (peers.py): the log writes it as it lies there, and
            # checks the slot still holds it before anyone may read what was written
            unchanged = functools.partial(self.payloads.unchanged, call.payload)
        if first_is_transactional(records):
            unverified = _txn_guard(found, records, call.verified)
            if unverified is not None:
                return unverified
        return self._appended(found, found.append(records, call.acks,
                                                  self.topics.config_for(call.topic).min_insync_replicas,
                                                  group_commit=group_commit, unchanged=unchanged), call.acks)

    def append_local(self, topic: str, partition: int, records) -> AppendResult:
        """A coordinator's own write to a partition this worker owns (its
        transactional offsets): no verification, no sequences; acks=1 (the
        coordinator waits for the high watermark itself)."""
        found = self._leading(topic, partition)
        if isinstance(found, ErrorCode):
            return AppendResult(found)
        return self._appended(found, found.append(records, 1, 1, origin=ORIGIN_COORDINATOR), 1)

    def write_marker(self, call: WriteMarker) -> AppendResult:
        """A transaction's marker on one partition; it ends the producer's
        verification guard here, and a marker on an offsets partition settles
        the offsets the transaction committed (``on_marker``)."""
        found = self._leading(call.topic, call.partition)
        if isinstance(found, ErrorCode):
            return AppendResult(found)
        entry = found.log.producer_state.entry(call.producer_id)
        if entry is not None and entry.coordinator_epoch > call.coordinator_epoch:
            # a coordinator that has been succeeded (its state partition has a newer leader epoch)
            return AppendResult(ErrorCode.transaction_coordinator_fenced,
                                message=f"coordinator epoch {call.coordinator_epoch} is older than "
                                        f"{entry.coordinator_epoch}")
        batch = encode_control_batch(COMMIT if call.commit else ABORT, producer_id=call.producer_id,
                                     producer_epoch=call.producer_epoch, coordinator_epoch=call.coordinator_epoch)
        # appended as acks=1, answered as acks=all: ``replicated`` says whether there is a wait left
        result = self._appended(found, found.append(bytearray(batch), 1, 1, origin=ORIGIN_COORDINATOR), -1)
        if result.error != ErrorCode.none:
            return result
        found.txn_guards.pop(call.producer_id, None)
        written = found.log.producer_state.entry(call.producer_id)
        if written is not None:  # as the log learns it from a marker that ends a transaction, and from any other
            written.coordinator_epoch = max(written.coordinator_epoch, call.coordinator_epoch)
        if self.on_marker is not None:
            self.on_marker(call.topic, call.partition, call.producer_id, call.commit)
        return result

    def _appended(self, found: Partition, result: AppendResult, acks: int) -> AppendResult:
        if result.error == ErrorCode.none:
            if self.replicas is not None:
                self.replicas.advance(found)  # an ISR of one: the high watermark moves now
            # long polls on it (standalone: consumers; in a cluster: followers); the log
            # published its new end itself
            self.purgatory.poke(found.key)
            if acks == -1 and found.log.high_watermark >= result.end_offset:  # the only replica, say
                result = msgspec.structs.replace(result, replicated=True)
        return result

    def locate(self, call: Locate):
        found = self._leading(call.topic, call.partition, call.current_leader_epoch)
        if isinstance(found, ErrorCode):
            return call.unanswered(found)
        return found.locate(call.offset, call.max_bytes, read_committed=call.read_committed)

    def follower_fetch(self, call: FollowerFetch):
        """A follower's fetch: first its position is recorded (the follower holds
        everything below ``offset``), which may grow the ISR and move the high
        watermark; then where its next batches are, up to the log end."""
        found = self._leading(call.topic, call.partition, call.current_leader_epoch)
        if isinstance(found, ErrorCode):
            return call.unanswered(found)
        if self.replicas is not None and self.replicas.follower_fetched(found, call.replica_id, call.replica_epoch,
                                                                        call.offset, call.log_start_offset):
            # the follower's position moved (a DeleteRecords may wait on it); what the
            # other workers read moves only with the high watermark, published as it moves
            self.purgatory.poke(found.key)
        return found.locate(call.offset, call.max_bytes, to_log_end=True)

    def list_offset(self, call: ListOffset):
        found = self._leading(call.topic, call.partition, call.current_leader_epoch)
        return (call.unanswered(found) if isinstance(found, ErrorCode)
                else found.list_offset(call.timestamp, call.read_committed))

    def bounds(self, call: PartitionBounds):
        found = self._leading(call.topic, call.partition)
        return call.unanswered(found) if isinstance(found, ErrorCode) else found.bounds()

    def describe_producers(self, call: DescribeProducers) -> ActiveProducers:
        found = self._leading(call.topic, call.partition)
        if isinstance(found, ErrorCode):
            return call.unanswered(found)
        return ActiveProducers(ErrorCode.none, [
            (e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
             e.current_txn_first_offset) for e in found.log.producer_state.producers.values()])

    def epoch_end(self, call: EpochEnd):
        found = self._leading(call.topic, call.partition, call.current_leader_epoch)
        return call.unanswered(found) if isinstance(found, ErrorCode) else found.epoch_end(call.leader_epoch)

    async def delete_records(self, call: DeleteRecords) -> DeletedRecords:
        """DeleteRecords: the leader's log start moves now; the answer waits until
        every in-sync replica has moved its own (Kafka's DelayedDeleteRecords), so a
        leader elected later has no record the client deleted."""
        found = self._leading(call.topic, call.partition)
        if isinstance(found, ErrorCode):
            return DeletedRecords(found)
        deleted = found.delete_records(call.offset)
        if deleted.error != ErrorCode.none or found.role is Role.STANDALONE:
            return deleted
        self.changed(found)
        epoch = found.leader_epoch
        caught_up = await self.purgatory.wait(
            [found.key], lambda: found.replicas_log_start() >= deleted.low_watermark or not _still(found, epoch),
            call.timeout_ms / 1000)
        if not _still(found, epoch):
            return DeletedRecords(ErrorCode.not_leader_or_follower)
        return deleted if caught_up else DeletedRecords(ErrorCode.request_timed_out, deleted.low_watermark)

    def delete_partition(self, call: DeletePartition) -> Done:
        """Remove a partition of a deleted topic, open or not."""
        key = (call.topic, call.partition)
        found = self._standalone.pop(key, None)
        if not self.logs.delete_log(*key):
            for log_dir in self.logs.log_dirs:
                path = os.path.join(log_dir, filenames.partition_dir_name(*key))
                if os.path.isdir(path):
                    doomed = os.path.join(log_dir, filenames.delete_dir_name(*key))
                    os.rename(path, doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
        if found is not None:
            found.role = Role.OFFLINE  # whoever still holds it sees it gone
        self.publisher.withdraw(*key)
        self._send_home(*key)
        self.topics.changed_here()  # a partition directory went
        self.purgatory.poke(key)  # long polls on it answer now
        return Done(ErrorCode.none)

    # --- moves between workers ------------------------------------------------------------------
    def move_partition(self, call: MovePartition) -> Done:
        """Hand a standalone partition to worker ``call.to``, which alone wrote
        it of late (``partition_moves.py``)."""
        found = self._movable(call)
        if isinstance(found, ErrorCode):
            return Done(found)
        self._hand_over(call, "its only writer of late")
        return Done(ErrorCode.none)

    def give_back(self) -> list[tuple[str, int]]:
        """Hand every partition that moved here back to the worker its hash
        names, whoever writes it (a saturated worker spreading out,
        ``gathering.py``); those that may not move now stay."""
        if self.placement is None or self.moved is None or self.moves is None:
            return []
        given = []
        for topic, partition in list(self.logs.logs()):
            home = partition_owner(topic, partition, self.placement.workers)
            if home == self.index:
                continue
            call = MovePartition(topic, partition, home)
            if isinstance(self._movable(call, writers_checked=False), ErrorCode):
                continue
            try:
                self._hand_over(call, "its hashed owner, as this worker spreads out")
            except (OSError, StorageError) as exc:  # not released: the log stays here, open, as if refused
                log.warning("%s-%d could not go back to worker %d: %s", topic, partition, home, exc)
                continue
            given.append((topic, partition))
        return given

    def _hand_over(self, call: MovePartition, why: str) -> None:
        """The log closed without an fsync, the move recorded for every worker,
        the entry withdrawn from the table, the long polls on it woken to look
        where it went."""
        key = (call.topic, call.partition)
        assert self.moved is not None and self.moves is not None
        previous = self.moved.move(*key)
        recovery_point, log_start = self.logs.release_log(*key)
        # the Partition keeps its role: a group commit's waiter still here is answered by the fsync the
        # release made, not refused
        self._standalone.pop(key, None)
        self.publisher.withdraw(*key)
        self.moves.record(*key, Move((previous.number if previous else 0) + 1, call.to, recovery_point, log_start),
                          self.moved)
        self.sources.forget(key)
        self.purgatory.poke(key)
        observe.partition_moved()
        log.info("%s-%d moved to worker %d, %s (fsynced below %d)", *key, call.to, why, recovery_point)

    def _movable(self, call: MovePartition, writers_checked: bool = True) -> Partition | ErrorCode:
        """The partition, when it may go to ``call.to`` now; else why not
        (``writers_checked``: not while anyone but ``call.to`` writes it)."""
        key = (call.topic, call.partition)
        if self.placement is None or self.moved is None or self.moves is None or self.replicas is not None:
            return ErrorCode.invalid_request  # nothing moves here (a replicated broker's partitions never do)
        if not movable_topic(call.topic) or call.to == self.index or not 0 <= call.to < self.placement.workers:
            return ErrorCode.invalid_request
        found = self.resolve(*key)
        if isinstance(found, ErrorCode):
            return found
        if (writers_checked and self.sources.others_recently(key, call.to)  # someone else writes it too: it stays
                or found.log.config.compact  # the cleaner's thread works on this worker's logs
                or found.txn_guards  # a transaction is under way on it
                or found.log.producer_state.first_unstable_offset(found.log.log_end_offset) is not None
                or not self.moves.has_room(*key, self.moved)):
            return ErrorCode.reassignment_in_progress
        return found

    def _send_home(self, topic: str, partition: int) -> None:
        """A deleted partition that had moved goes back to its hashed owner, with
        nothing to adopt: a topic made again with its name starts empty there."""
        if self.placement is None or self.moved is None or self.moves is None:
            return
        previous = self.moved.move(topic, partition)
        home = partition_owner(topic, partition, self.placement.workers)
        if previous is not None and previous.to != home:
            self.moves.record(topic, partition, Move(previous.number + 1, home, 0, 0), self.moved)

    def _moved_durable(self, topic: str, partition: int, end_offset: int) -> bool:
        """The partition moved away from here after writing ``end_offset`` and fsyncing it (``Log.release``)."""
        if self.moved is None:
            return False
        move = self.moved.move(topic, partition)
        return move is not None and move.to != self.index and move.recovery_point >= end_offset

    # --- waits ----------------------------------------------------------------------------------
    async def wait_replicated(self, call: WaitReplicated) -> Replicated:
        """acks=all, per (topic, partition, end offset): once the high watermark
        passed it (which also waits for a group commit's fsync, ``Log.append``);
        with ``durable_only`` (acks=1) once the leader's own fsync did.  Kafka's
        answers otherwise: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR had
        shrunk below min.insync.replicas by then, NOT_LEADER_OR_FOLLOWER when
        leadership went, KAFKA_STORAGE_ERROR when the fsync failed,
        REQUEST_TIMED_OUT when time ran out."""
        timeout_s = call.timeout_ms / 1000
        return Replicated(await eager.all_of([self._replicated(topic, partition, end, timeout_s, call.durable_only)
                                              for topic, partition, end in call.items]))

    async def _replicated(self, topic: str, partition: int, end_offset: int, timeout_s: float,
                          durable_only: bool = False) -> ErrorCode:
        found = self.resolve(topic, partition)
        if isinstance(found, ErrorCode) or found.role not in (Role.LEADER, Role.STANDALONE):
            # an acks=1 produce whose group commit the move to another worker fsynced has its answer
            return ErrorCode.none if self._moved_durable(topic, partition, end_offset) else \
                ErrorCode.not_leader_or_follower
        partition_log, epoch = found.log, found.leader_epoch

        def failed() -> bool:  # the fsync it waits for failed (the next tick tries again)
            return partition_log.flush_failed(end_offset)

        if durable_only or found.role is Role.STANDALONE:  # the one replica has it once it is on disk
            def done() -> bool:
                return not partition_log.owes_flush(end_offset)

            reached = done() or await self.purgatory.wait(
                [found.key], lambda: done() or failed() or not _still(found, epoch), timeout_s)
        else:
            def done() -> bool:
                return partition_log.high_watermark >= end_offset

            # in the partition's queue by offset: a poke looks at the high watermark once, not at each waiter
            reached = done() or await self.purgatory.wait_for_offset(
                found.key, end_offset, timeout_s, (id(found), epoch), lambda: partition_log.high_watermark,
                lambda: _still(found, epoch), lambda: partition_log.flush_failure is not None,
                partition_log.flush_failed)
        if not _still(found, epoch):
            return ErrorCode.not_leader_or_follower
        if failed():
            return ErrorCode.kafka_storage_error
        if not reached or not done():
            return ErrorCode.request_timed_out
        if not durable_only and found.isr_size() < self.topics.config_for(topic).min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    # --- group commits ------------------------------------------------------------------------
    def group_flushes_on(self, loop) -> None:
        """The flush.messages fsyncs of client produces (``Log.append``'s
        group commit) wait for the end of the loop's turn: the appends of every
        request the turn read share one fsync per partition, done on the loop
        (an fsync handed to a thread costs more in wake-ups and the GIL than
        it saves here), and the answers waiting for it go out after it."""
        def soon(partition_log) -> None:
            if not self._owing_flush:
                loop.call_soon(self._flush_owed)
            self._owing_flush.append(partition_log)
        self.logs.group_flush = soon

    def _flush_owed(self) -> None:
        owing, self._owing_flush = self._owing_flush, []
        for partition_log in owing:
            try:
                partition_log.flush_owed()
            except StorageError as exc:  # the answers waiting for it fail; the next tick tries again
                _flush_failures.log(logging.ERROR, (partition_log.topic, partition_log.partition), "%s", exc)
            self.purgatory.poke((partition_log.topic, partition_log.partition))

    async def wait_for_data(self, call: WaitForData) -> DataReady:
        """A fetch long poll: until any (topic, partition) has data at or beyond
        its offset (below the high watermark unless for a replica), or it stopped
        being led here; False after the timeout."""
        def ready() -> bool:
            for topic, partition, offset in call.items:
                found = self.resolve(topic, partition)
                if isinstance(found, ErrorCode) or found.has_data_beyond(offset, call.replica):
                    return True
            return False
        keys = [(topic, partition) for topic, partition, _ in call.items]
        return DataReady(await self.purgatory.wait(keys, ready, call.timeout_ms / 1000))

    # --- periodic work --------------------------------------------------------------------
    def tick(self) -> None:
        self.topics.refresh()  # notice topics deleted or grown through other workers
        if self.topics.generation != self._configs_generation:
            self._configs_generation = self.topics.generation
            self.logs.reconfigure()  # topic settings changed through any worker reach the open logs
        self.logs.tick(now_ms())


_MAX_GUARDS = 10_000
_guards = itertools.count(1)


def txn_guard(found: Partition, producer_id: int, epoch: int) -> int | None:
    """KIP-890: before a transactional write that may open the producer's
    transaction on ``found``, the guard (a token) under which to ask its
    coordinator; None when the transaction is open here already (the write
    joins it, no question to ask).  A marker for the producer ends its guard."""
    entry = found.log.producer_state.entry(producer_id)
    if entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == epoch:
        return None
    guard = found.txn_guards.get(producer_id)
    if guard is None or guard[0] != epoch:
        if len(found.txn_guards) >= _MAX_GUARDS:
            found.txn_guards.clear()  # producers that never came back; a live one just verifies again
        guard = found.txn_guards[producer_id] = (epoch, next(_guards))
    return guard[1]


def txn_guard_holds(found: Partition, producer_id: int, epoch: int, token: int) -> bool:
    """No marker for the producer ended the guard since ``token`` was handed out
    (or its transaction has opened here since)."""
    entry = found.log.producer_state.entry(producer_id)
    if entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == epoch:
        return True
    return found.txn_guards.get(producer_id) == (epoch, token)


def _txn_guard(found: Partition, records, verified: int) -> AppendResult | None:
    """KIP-890's check of a transactional produce: None when it may be
    appended (its producer's transaction is open here already, or the
    coordinator confirmed the partition is in it under a guard no marker has
    ended since); otherwise the answer asking the caller to verify first, or
    INVALID_TXN_STATE when the transaction ended after the confirmation."""
    producer = first_producer(records)
    if producer is None:
        return None  # the log refuses the batch itself
    producer_id, epoch = producer
    entry = found.log.producer_state.entry(producer_id)
    if entry is not None and epoch < entry.producer_epoch:
        return None  # a fenced producer: the log answers INVALID_PRODUCER_EPOCH, the error it must see
    if verified:
        if txn_guard_holds(found, producer_id, epoch, verified):
            return None
        return AppendResult(ErrorCode.invalid_txn_state, log_start_offset=found.log.log_start_offset,
                            message=f"the transaction of producer {producer_id} ended before its produce to "
                                    f"{found.topic}-{found.index} arrived")
    token = txn_guard(found, producer_id, epoch)
    return None if token is None else AppendResult(ErrorCode.none, verify=token)


def _still(found: Partition, epoch: int) -> bool:
    """The partition is still led here under the epoch a wait began in (doubt aside)."""
    return found.role in (Role.LEADER, Role.STANDALONE) and found.leader_epoch == epoch
