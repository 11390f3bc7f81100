"""The transaction coordinator of one worker: the transactional ids whose
``__transaction_state`` partition this worker owns (KIP-98).

Request handlers on any worker send a transactional id's calls here as owner
calls (``owner_calls.InitTxnProducer`` ...), as group calls go to the group
coordinator.  Every change of a transaction is appended to the id's
``__transaction_state`` partition (compacted, Kafka's layout) and takes
effect once written; while it is being written, or while a transaction's
markers are being sent, other calls for the id are answered
CONCURRENT_TRANSACTIONS, which every client retries.

Ending a transaction: EndTxn writes PrepareCommit/PrepareAbort, then a COMMIT
or ABORT marker goes to every partition of the transaction (``markers.py``:
through its owning worker here, or as WriteTxnMarkers to the broker leading
it; retried until written), then CompleteCommit/CompleteAbort.  The decision
is taken when the Prepare state is written: a coordinator that starts after
that (a restart, a new leader of the state partition) sends the markers.
EndTxn is answered once the markers are written (or after ``MARKERS_WAIT_S``,
when they go on in the background), so a producer's next transaction rarely
meets CONCURRENT_TRANSACTIONS.

A transaction open longer than its timeout is aborted, and its producer
fenced with a new epoch; a transactional id unused for
``transactional.id.expiration.ms`` is forgotten (a tombstone).
"""

from __future__ import annotations

import asyncio
import logging

from hpbroker.clock import now_ms
from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch
from hpbroker.server.logging_setup import Throttled
from hpbroker.server.ownership import TRANSACTION_TOPIC, txn_partition
from hpbroker.workers.owner_calls import (
    AddTxnPartitions,
    Append,
    DescribedTxn,
    DescribeTxn,
    Done,
    EndTxn,
    InitTxnProducer,
    ListedTxn,
    ListTxns,
    PartitionError,
    ProducerIdResult,
    TxnListing,
    TxnPartitionsResult,
    WaitReplicated,
    WriteMarker,
)
from hpbroker.workers.state_partitions import StatePartitions
from hpbroker.workers.topics import TopicError
from hpbroker.workers.transactions import markers, records as R
from hpbroker.workers.transactions.state import COMPLETE, MAX_EPOCH, PREPARING, TxnMetadata, TxnState

log = logging.getLogger(__name__)

WRITE_TIMEOUT_MS = 5000
MARKERS_WAIT_S = 5.0  # EndTxn waits this long for its markers before answering anyway
MARKER_BACKOFF_S = (0.02, 1.0)  # a marker that failed is sent again after this (doubling, capped)


def _a_retry(md: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Whether an InitProducerId naming ``producer_id`` and ``producer_epoch`` is a
    retry of the one that made ``md``'s producer (its answer lost on the way):
    it named the epoch before, or, when that call found the epoch exhausted
    and gave a new id, the id before and an exhausted epoch."""
    if producer_id == md.producer_id:
        return producer_epoch == md.last_epoch
    return producer_id == md.previous_producer_id and producer_epoch >= MAX_EPOCH - 1


class TransactionCoordinator(StatePartitions):
    def __init__(self, partitions, topics, config, index: int, workers: int, leads=None, fenced=None):
        super().__init__(partitions, topics, TRANSACTION_TOPIC, config["transaction.state.log.num.partitions"],
                         index, workers, leads, fenced)
        self.state_partitions = self.partition_count
        self.topic_config = {"cleanup.policy": "compact", "compression.type": "producer",
                             "segment.bytes": str(config["transaction.state.log.segment.bytes"])}
        self.max_timeout_ms = config["transaction.max.timeout.ms"]
        self.id_expiration_ms = config["transactional.id.expiration.ms"]
        self.abort_check_s = config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        self.txns: dict[str, TxnMetadata] = {}
        self.owners = None  # owners.Owners: the markers go to each partition's owner (set by ``attach``)
        self.producer_ids = None  # the worker's producer id allocator (set by ``attach``)
        self.cluster = None  # the cluster view: which broker leads a partition (set by ``attach``)
        self.broker_clients = None  # BrokerClients in a cluster: markers to other brokers (set by ``attach``)
        self.broker_id = -1
        self._creating: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._problems = Throttled(log)

    def attach(self, owners, producer_ids, cluster=None, broker_clients=None, broker_id: int = -1) -> None:
        self.owners = owners
        self.producer_ids = producer_ids
        self.cluster = cluster
        self.broker_clients = broker_clients
        self.broker_id = broker_id

    def _in_cluster(self) -> bool:
        return self.cluster is not None and not self.cluster.standalone

    def coordinator_broker(self, transactional_id: str) -> int | None:
        """Where the id's coordinator is: None for this broker, a broker id, or
        -1 when its state partition has no leader now."""
        return self._leader_of(TRANSACTION_TOPIC, txn_partition(transactional_id, self.state_partitions))

    def _leader_of(self, topic: str, partition: int) -> int | None:
        """The broker leading a partition: None for this one, -1 for none now."""
        if not self._in_cluster():
            return None
        assert self.cluster is not None  # _in_cluster
        found = self.cluster.partition(topic, partition)
        if found.error != ErrorCode.none:
            return -1
        return None if found.leader == self.broker_id else found.leader

    def handlers(self) -> dict:
        """Call type -> the method answering it (``owners.py`` dispatches on it)."""
        return {InitTxnProducer: self.init_producer, AddTxnPartitions: self.add_partitions, EndTxn: self.end_txn,
                DescribeTxn: self.describe, ListTxns: self.list_transactions}

    # --- topic, ownership, loading ----------------------------------------------------
    async def ensure_topic(self) -> ErrorCode:
        """Create ``__transaction_state`` if nobody has yet (FindCoordinator asks)."""
        if self.topics.get(TRANSACTION_TOPIC) is not None:
            return ErrorCode.none
        try:
            await self.topics.create(TRANSACTION_TOPIC, self.state_partitions, self.topic_config)
        except TopicError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                self._problems.log(logging.ERROR, "create", "cannot create %s: %s", TRANSACTION_TOPIC, exc)
                return ErrorCode.coordinator_not_available
        return ErrorCode.none

    def start(self) -> None:
        """Replay the owned partitions (in the background) and arm the timeout check."""
        self._load_led()
        self._timer = asyncio.get_running_loop().call_later(self.abort_check_s, self._check_timeouts)

    def _replay(self, p: int):
        """Read the partition in order, the last value of each id winning; yields after each chunk."""
        found: dict[str, R.TxnLogValue | None] = {}
        for batches in self._chunks(p):
            for batch in batches:
                if not batch.header.is_control:
                    for record in batch.records:
                        self._apply(record.key, record.value, found)
            yield
        for tid, value in found.items():
            if value is not None:
                self.txns[tid] = TxnMetadata.from_value(tid, value)
        if found:
            log.info("loaded %s-%d: %d transactional ids", TRANSACTION_TOPIC, p,
                     sum(1 for v in found.values() if v is not None))

    def _apply(self, key, value, found: dict) -> None:
        if key is None:
            return
        try:
            tid = R.decode_key(key)
            found[tid] = None if value is None else R.decode_value(value)
        except R.TransactionLogError as exc:
            self._problems.log(logging.WARNING, "decode", "skipping a record of %s: %s", TRANSACTION_TOPIC, exc)

    def _loaded_now(self, p: int) -> None:
        """Transactions whose outcome was decided get their markers."""
        for md in list(self.txns.values()):
            if md.state in PREPARING and txn_partition(md.transactional_id, self.state_partitions) == p:
                self._spawn(self._complete(md))

    def _check(self, transactional_id: str | None) -> ErrorCode:
        """None-error when this worker coordinates the id and has it loaded."""
        if not transactional_id:
            return ErrorCode.invalid_request
        return self._check_partition(txn_partition(transactional_id, self.state_partitions))

    def leadership_changed(self, p: int, leading: bool) -> None:
        """This broker started or stopped leading state partition ``p``; a new
        leader loads it at once, not on first use: a decided transaction needs
        its markers, and an open one its timeout, whether its producer comes
        back or not."""
        super().leadership_changed(p, leading)
        if leading:
            log.info("coordinating the transactions of %s-%d", TRANSACTION_TOPIC, p)
            self._load_in_background(p)

    def _forget(self, p: int) -> None:
        for tid in [t for t in self.txns if txn_partition(t, self.state_partitions) == p]:
            del self.txns[tid]

    # --- writing a change ----------------------------------------------------------------
    async def _transition(self, md: TxnMetadata, new: TxnMetadata | None) -> ErrorCode:
        """Write ``new`` (None: forget the id) for ``md``'s id; once written, it is the id's state."""
        tid = md.transactional_id
        p = txn_partition(tid, self.state_partitions)
        if self.txns.get(tid) is not md or md.busy:
            return ErrorCode.concurrent_transactions  # changed since its caller looked: nothing written
        md.busy = True
        try:
            value = None if new is None else R.encode_value(new.value())
            batch = encode_batch([Record(0, now_ms(), R.encode_key(tid), value)])
            appended = self.partitions.append(Append(TRANSACTION_TOPIC, p, bytearray(batch)))
            error = appended.error
            if error == ErrorCode.none:
                waited = await self.partitions.wait_replicated(
                    WaitReplicated([(TRANSACTION_TOPIC, p, appended.end_offset)], WRITE_TIMEOUT_MS))
                error = waited.errors[0]
        finally:
            md.busy = False
        if error != ErrorCode.none:
            self._problems.log(logging.WARNING, ("write", error), "writing transaction %r to %s failed: %s", tid,
                               TRANSACTION_TOPIC, ErrorCode(error).name)
            return ErrorCode.not_coordinator if error == ErrorCode.not_leader_or_follower else \
                ErrorCode.coordinator_not_available
        if self.txns.get(tid) is not md:
            return ErrorCode.not_coordinator  # leadership moved while it was written
        if new is None:
            del self.txns[tid]
        else:
            self.txns[tid] = new
        return ErrorCode.none

    # --- InitProducerId ---------------------------------------------------------------------
    async def init_producer(self, call: InitTxnProducer) -> ProducerIdResult:
        tid = call.transactional_id
        error = self._check(tid)
        if error != ErrorCode.none:
            return ProducerIdResult(error)
        if not 0 < call.timeout_ms <= self.max_timeout_ms:
            return ProducerIdResult(ErrorCode.invalid_transaction_timeout)
        md = self.txns.get(tid)
        if md is None:
            return await self._first_producer(tid, call.timeout_ms)
        if md.busy or md.state in PREPARING or md.state is TxnState.PREPARE_EPOCH_FENCE:
            return ProducerIdResult(ErrorCode.concurrent_transactions)
        if call.producer_id >= 0:  # KIP-360: the caller names the producer it was
            if call.producer_id != md.producer_id or call.producer_epoch != md.producer_epoch:
                if md.state is TxnState.EMPTY and _a_retry(md, call.producer_id, call.producer_epoch):
                    return ProducerIdResult(ErrorCode.none, md.producer_id, md.producer_epoch)
                return ProducerIdResult(ErrorCode.producer_fenced)
        if md.state is TxnState.ONGOING:
            # a new instance fences the old: its transaction is aborted under a new
            # epoch first, and the caller, told to retry, then gets the epoch after
            self._spawn(self._fence_and_abort(md, "a new instance of the producer started"))
            return ProducerIdResult(ErrorCode.concurrent_transactions)
        if md.producer_epoch + 1 >= MAX_EPOCH:  # exhausted: a new id, as Kafka does
            try:
                producer_id, epoch = await self._allocate(), 0
            except AdminError as exc:
                log.warning("no producer id for %r: %s", tid, exc)
                return ProducerIdResult(ErrorCode.coordinator_not_available)
            if self.txns.get(tid) is not md or md.busy:
                return ProducerIdResult(ErrorCode.concurrent_transactions)
        else:
            producer_id, epoch = md.producer_id, md.producer_epoch + 1
        now = now_ms()
        rotated = producer_id != md.producer_id
        new = md.moved(producer_id=producer_id, producer_epoch=epoch, timeout_ms=call.timeout_ms,
                       state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1, last_update_ms=now,
                       last_epoch=-1 if rotated else md.producer_epoch,
                       previous_producer_id=md.producer_id if rotated else -1)
        error = await self._transition(md, new)
        if error != ErrorCode.none:
            return ProducerIdResult(error)
        return ProducerIdResult(ErrorCode.none, producer_id, epoch)

    async def _allocate(self) -> int:
        assert self.producer_ids is not None, "attach() first"
        return await self.producer_ids.allocate()

    async def _first_producer(self, tid: str, timeout_ms: int) -> ProducerIdResult:
        if tid in self._creating:
            return ProducerIdResult(ErrorCode.concurrent_transactions)
        self._creating.add(tid)
        try:
            producer_id = await self._allocate()
        except AdminError as exc:
            log.warning("no producer id for %r: %s", tid, exc)
            return ProducerIdResult(ErrorCode.coordinator_not_available)
        finally:
            self._creating.discard(tid)
        error = self._check(tid)  # the partition may have moved, or be loading again, meanwhile
        if error != ErrorCode.none:
            return ProducerIdResult(error)
        if tid in self.txns:
            return ProducerIdResult(ErrorCode.concurrent_transactions)
        now = now_ms()
        placeholder = self.txns[tid] = TxnMetadata(tid, producer_id, -1, timeout_ms, last_update_ms=now)
        error = await self._transition(placeholder, placeholder.moved(producer_epoch=0))
        if error != ErrorCode.none:
            if self.txns.get(tid) is placeholder:
                del self.txns[tid]
            return ProducerIdResult(error)
        return ProducerIdResult(ErrorCode.none, producer_id, 0)

    # --- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    def _producer(self, call: AddTxnPartitions | EndTxn) -> tuple[ErrorCode, TxnMetadata | None]:
        """The call's transactional id, checked to be coordinated here and to name
        its current producer id and epoch: (error, its metadata when none)."""
        error = self._check(call.transactional_id)
        md = self.txns.get(call.transactional_id)
        if error != ErrorCode.none:
            return error, None
        if md is None or md.producer_id != call.producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if md.producer_epoch != call.producer_epoch:
            return ErrorCode.producer_fenced, None
        return ErrorCode.none, md

    async def add_partitions(self, call: AddTxnPartitions) -> TxnPartitionsResult:
        error, md = self._producer(call)
        if md is None:
            return call.unanswered(error)
        if call.verify_only:
            ongoing = md.state is TxnState.ONGOING
            return TxnPartitionsResult(ErrorCode.none, [
                PartitionError(t, p, ErrorCode.none if ongoing and (t, p) in md.partitions
                               else ErrorCode.invalid_txn_state) for t, p in call.partitions])
        if md.busy or md.state in PREPARING or md.state is TxnState.PREPARE_EPOCH_FENCE:
            return call.unanswered(ErrorCode.concurrent_transactions)
        wanted = frozenset(call.partitions)
        ongoing = md.state is TxnState.ONGOING
        if not (ongoing and wanted <= md.partitions):
            now = now_ms()
            new = md.moved(state=TxnState.ONGOING, partitions=(md.partitions | wanted) if ongoing else wanted,
                           start_ms=md.start_ms if ongoing else now, last_update_ms=now)
            error = await self._transition(md, new)
            if error != ErrorCode.none:
                return call.unanswered(error)
        return TxnPartitionsResult(ErrorCode.none, [PartitionError(t, p, ErrorCode.none) for t, p in call.partitions])

    # --- EndTxn ----------------------------------------------------------------------------------
    async def end_txn(self, call: EndTxn) -> Done:
        error, md = self._producer(call)
        if md is None:
            return Done(error)
        if md.busy:
            return Done(ErrorCode.concurrent_transactions)
        wanted = TxnState.COMPLETE_COMMIT if call.commit else TxnState.COMPLETE_ABORT
        if md.state in COMPLETE:  # a retry of the EndTxn that ended it, or a mismatch
            return Done(ErrorCode.none if md.state is wanted else ErrorCode.invalid_txn_state)
        if md.state in PREPARING:
            preparing = TxnState.PREPARE_COMMIT if call.commit else TxnState.PREPARE_ABORT
            return Done(ErrorCode.concurrent_transactions if md.state is preparing else ErrorCode.invalid_txn_state)
        if md.state is not TxnState.ONGOING:
            return Done(ErrorCode.invalid_txn_state)
        new = md.moved(state=TxnState.PREPARE_COMMIT if call.commit else TxnState.PREPARE_ABORT,
                       last_update_ms=now_ms())
        error = await self._transition(md, new)
        if error != ErrorCode.none:
            return Done(error)
        completing = self._spawn(self._complete(new))
        # decided: the answer is success whether the markers are all written yet or not
        await asyncio.wait([completing], timeout=MARKERS_WAIT_S)
        return Done(ErrorCode.none)

    async def _fence_and_abort(self, md: TxnMetadata, why: str) -> None:
        """Abort ``md``'s open transaction under a bumped epoch, so its producer
        can write nothing more to it (a new instance, or its timeout)."""
        if md.busy or md.state is not TxnState.ONGOING or self.txns.get(md.transactional_id) is not md:
            return
        log.info("aborting the transaction of %r (producer %d, epoch %d): %s", md.transactional_id,
                 md.producer_id, md.producer_epoch, why)
        new = md.moved(producer_epoch=min(md.producer_epoch + 1, MAX_EPOCH), last_epoch=-1,
                       previous_producer_id=-1, state=TxnState.PREPARE_ABORT, last_update_ms=now_ms())
        if await self._transition(md, new) == ErrorCode.none:
            await self._complete(new)

    async def _complete(self, md: TxnMetadata) -> None:
        """Send a decided transaction's markers until every partition has its own,
        then write it complete.  Gives up only when the id is no longer
        coordinated here (the new coordinator finishes it)."""
        assert self.owners is not None, "attach() first"
        commit = md.state is TxnState.PREPARE_COMMIT
        tid = md.transactional_id
        epoch = self._coordinator_epoch(tid)
        pending = sorted(md.partitions)
        delay = MARKER_BACKOFF_S[0]
        while True:
            if self.txns.get(tid) is not md or self._closed:
                return
            try:
                pending = await self._completion_round(md, pending, epoch, commit)
            except Exception:  # a bug: the transaction must still end, so on it goes
                log.exception("completing the transaction of %r failed; retrying", tid)
            if pending is None:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, MARKER_BACKOFF_S[1])

    async def _completion_round(self, md: TxnMetadata, pending: list, epoch: int, commit: bool) -> list | None:
        """One round of ``_complete``: the partitions still without their marker,
        or None when it is over (complete, or no longer this coordinator's)."""
        tid = md.transactional_id
        if pending:
            failed = await self._send_markers(md, pending, epoch, commit)
            if any(error == ErrorCode.transaction_coordinator_fenced for _key, error in failed):
                log.warning("markers of %r refused: a newer coordinator has taken over", tid)
                return None
            # a partition that knows a newer epoch of the producer has no open transaction of
            # this one to end (Kafka's coordinator drops such a marker too)
            pending = [key for key, error in failed if error != ErrorCode.invalid_producer_epoch]
            if failed:
                self._problems.log(logging.WARNING, ("markers", tid), "markers of %r: %d partition(s) not "
                                   "written yet (%s); retrying", tid, len(pending), ErrorCode(failed[0][1]).name)
        if pending:
            return pending
        if self.txns.get(tid) is not md:
            return None
        done = md.moved(state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                        partitions=frozenset(), last_update_ms=now_ms())
        return None if await self._transition(md, done) == ErrorCode.none else pending

    async def _send_markers(self, md: TxnMetadata, partitions: list, epoch: int,
                            commit: bool) -> list[tuple[tuple[str, int], ErrorCode]]:
        """One round of markers to every leader; the partitions that failed, with why.
        A partition of a topic deleted meanwhile needs no marker: that is this
        worker's image's say.  A leader that answers the topic unknown is
        retried, as Kafka's coordinator does: it may not have seen a topic
        created a moment ago, and taking its word would leave the transaction
        open there, its last stable offset held for good."""
        by_leader: dict[int | None, list[WriteMarker]] = {}
        failed: list[tuple[tuple[str, int], ErrorCode]] = []
        self.topics.refresh()  # standalone: a topic another worker deleted
        for t, p in partitions:
            if self.topics.get(t) is None:
                # as Kafka's coordinator, which skips a partition it finds no leader for: said, as
                # a topic this worker does not know yet would leave the transaction open there
                log.warning("markers of %r: topic %s is not known here (deleted?): no marker for partition %d",
                            md.transactional_id, t, p)
                continue
            leader = self._leader_of(t, p)
            if leader is not None and leader < 0:
                failed.append(((t, p), ErrorCode.leader_not_available))
                continue
            by_leader.setdefault(leader, []).append(
                WriteMarker(t, p, md.producer_id, md.producer_epoch, epoch, commit))

        async def one(leader: int | None, calls: list[WriteMarker]) -> None:
            if leader is None:
                errors = await markers.write_here(self.owners, calls)
            else:
                errors = await markers.write_there(self.broker_clients, leader, calls)
            failed.extend(((c.topic, c.partition), e) for c, e in zip(calls, errors)
                          if e != ErrorCode.none)

        await asyncio.gather(*(one(leader, calls) for leader, calls in by_leader.items()))
        return failed

    def _coordinator_epoch(self, tid: str) -> int:
        """The leader epoch of the id's state partition: markers carry it."""
        found = self.partitions.resolve(TRANSACTION_TOPIC, txn_partition(tid, self.state_partitions))
        return 0 if isinstance(found, ErrorCode) else found.leader_epoch

    # --- administration ------------------------------------------------------------------------
    def describe(self, call: DescribeTxn) -> DescribedTxn:
        error = self._check(call.transactional_id)
        md = self.txns.get(call.transactional_id)
        if error == ErrorCode.none and (md is None or md.producer_epoch < 0):
            error = ErrorCode.transactional_id_not_found
        if error != ErrorCode.none or md is None:
            return DescribedTxn(error, call.transactional_id)
        return DescribedTxn(ErrorCode.none, md.transactional_id, md.state.display, md.timeout_ms, md.start_ms,
                            md.producer_id, md.producer_epoch, sorted(md.partitions))

    def list_transactions(self, call: ListTxns) -> TxnListing:
        states = {s.lower() for s in call.states}
        pids = set(call.producer_ids)
        now = now_ms()
        rows = [ListedTxn(md.transactional_id, md.producer_id, md.state.display) for md in self.txns.values()
                if md.producer_epoch >= 0
                and (not states or md.state.display.lower() in states)
                and (not pids or md.producer_id in pids)
                and (call.min_duration_ms < 0 or now - md.start_ms > call.min_duration_ms)]  # Kafka's test
        return TxnListing(ErrorCode.coordinator_load_in_progress if self._loading else ErrorCode.none, rows)

    # --- timeouts and expiry --------------------------------------------------------------------
    def _check_timeouts(self) -> None:
        try:
            self.abort_timed_out(now_ms())
        except Exception:
            log.exception("the transaction timeout check failed")
        if not self._closed:
            self._timer = asyncio.get_running_loop().call_later(self.abort_check_s, self._check_timeouts)

    def abort_timed_out(self, now: int) -> int:
        """Abort (fencing their producers) the transactions open past their
        timeout; forget the ids unused for ``transactional.id.expiration.ms``.
        Returns how many were aborted."""
        aborted = 0
        for md in list(self.txns.values()):
            if md.busy or txn_partition(md.transactional_id, self.state_partitions) not in self._loaded:
                continue
            if md.expired(now):
                self._spawn(self._fence_and_abort(md, f"open for more than its timeout of {md.timeout_ms} ms"))
                aborted += 1
            elif (md.state in COMPLETE or md.state is TxnState.EMPTY) and \
                    now - md.last_update_ms >= self.id_expiration_ms:
                self._spawn(self._expire(md))
        return aborted

    async def _expire(self, md: TxnMetadata) -> None:
        """Forget an id unused for ``transactional.id.expiration.ms``, if it still
        is when the tombstone is written (``_transition`` checks it is unchanged)."""
        if md.state in COMPLETE or md.state is TxnState.EMPTY:
            if await self._transition(md, None) == ErrorCode.none:
                log.info("transactional id %r expired", md.transactional_id)

    def close(self) -> None:
        """Stopping: no new calls; the marker senders stop where they are (a
        restart finishes the decided transactions from the log)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
