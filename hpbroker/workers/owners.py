"""How a request handler asks the owner of a partition or of a group: one
client, the same results and the same failures whether the owner is this
worker or another (Redpanda's ``invoke_on``, Kafka's ``ReplicaManager`` calls).

* ``Owner`` is the interface: ``await owner.call(call) -> result``, raising
  ``OwnerError(error, why)`` when no result comes.  ``LocalOwner`` runs the
  call on this worker's own services; ``PeerOwner`` sends it over the peer
  channel (``peers.py``) to a worker whose ``PeerServer`` runs it on *its*
  ``LocalOwner``, so a call fails the same way in both: an owner's disk error
  is KAFKA_STORAGE_ERROR, its bug UNKNOWN_SERVER_ERROR (logged with its
  traceback where it happened), an owner that is away (restarting)
  NOT_LEADER_OR_FOLLOWER for a partition, COORDINATOR_NOT_AVAILABLE for a
  group (both retriable: clients look again, as while a partition moves).
* ``Owners`` is what handlers hold (``ctx.owners``): ``ask(call)`` routes a
  call to the worker owning its partition or group and never raises: a failure
  becomes the call's own ``unanswered(error)`` result.  ``ask_all(calls)``
  sends partition calls as one ``Batch`` per owning worker.  A standalone
  partition may move to another worker (``partition_moves.py``): a call that
  reached its old owner after it let go comes back NOT_LEADER_OR_FOLLOWER and
  is asked again where it went, and the appends this worker forwards are
  counted, so that a partition only this worker writes can move here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import DEFAULT_TRANSACTION_PARTITIONS, group_owner, txn_owner
from hpbroker.workers import affinity
from hpbroker.workers.owner_calls import (
    GROUP_CALLS,
    PARTITION_CALLS,
    TXN_CALLS,
    Append,
    Batch,
    Batched,
    Done,
    Failed,
    ListGroups,
    ListTxns,
    MovePartition,
    OwnerError,
    WaitReplicated,
)
from hpbroker.workers.partition_moves import MoveRequests, Placement
from hpbroker.workers.peers import PeerUnavailable

log = logging.getLogger(__name__)


class Owner(Protocol):
    async def call(self, call) -> Any: ...


class LocalOwner:
    """This worker's own services: call type -> the method answering it."""

    def __init__(self, handlers: dict):
        self.handlers = dict(handlers)

    async def call(self, call):
        handler = self.handlers.get(type(call))
        if handler is None:
            raise OwnerError(ErrorCode.unknown_server_error, f"no service here answers {type(call).__name__}")
        try:
            result = handler(call)
            if hasattr(result, "__await__"):
                result = await result
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            log.exception("%s failed on its owner", type(call).__name__)
            raise OwnerError(ErrorCode.kafka_storage_error, f"{type(call).__name__}: {exc}") from None
        except Exception as exc:  # a bug: answered, logged, and this worker serves on
            log.exception("%s failed on its owner", type(call).__name__)
            raise OwnerError(ErrorCode.unknown_server_error, f"{type(call).__name__}: {exc!r}") from None
        return result


class PeerOwner:
    """Another worker, reached over the peer channel."""

    def __init__(self, peers, worker: int):
        self.peers = peers  # peers.PeerClient
        self.worker = worker

    async def call(self, call):
        try:
            result = await self.peers.call(self.worker, call)
        except PeerUnavailable as exc:
            raise OwnerError(_unreachable(call), f"worker {self.worker} is unavailable: {exc}") from None
        if isinstance(result, Failed):
            raise OwnerError(result.error, result.message)
        return result


def _refused(result) -> bool:
    """The owner asked no longer has the partition (it may have moved on)."""
    return getattr(result, "error", None) == ErrorCode.not_leader_or_follower


def _unreachable(call) -> ErrorCode:
    """What a client is told when the owner of ``call`` cannot be reached."""
    if isinstance(call, WaitReplicated):
        return ErrorCode.request_timed_out  # appended, but nobody can say it is replicated
    if isinstance(call, GROUP_CALLS + TXN_CALLS + (ListGroups, ListTxns)):
        return ErrorCode.coordinator_not_available
    return ErrorCode.not_leader_or_follower


class Owners:
    def __init__(self, index: int, workers: int, local: LocalOwner, peers, offsets_partitions: int,
                 txn_partitions: int = DEFAULT_TRANSACTION_PARTITIONS, placement: Placement | None = None,
                 move_after: int = 0, moves_held_off: Callable[[], bool] | None = None):
        self.index = index
        self.workers = workers
        self.local = local
        self.peers = peers
        self.offsets_partitions = offsets_partitions  # offsets.topic.num.partitions: where a group lives
        self.txn_partitions = txn_partitions  # transaction.state.log.num.partitions: where a transactional id lives
        self._remote = {worker: PeerOwner(peers, worker) for worker in range(workers) if worker != index}
        self.placement = placement or Placement(workers)
        # partitions move only where there is a map of their moves (standalone brokers)
        self.moving = self.placement.moves is not None
        self.moves = MoveRequests(move_after if self.moving else 0, self._ask_for, held_off=moves_held_off)

    def owner(self, worker: int) -> Owner:
        return self.local if worker == self.index else self._remote[worker]

    def owner_of(self, call) -> int:
        """The worker owning the partition, group or transactional id ``call`` is about."""
        if isinstance(call, PARTITION_CALLS):
            return self.placement.owner(call.topic, call.partition)
        if isinstance(call, GROUP_CALLS):
            return group_owner(call.group_id or "", self.workers, self.offsets_partitions)
        if isinstance(call, TXN_CALLS):
            return txn_owner(call.transactional_id, self.workers, self.txn_partitions)
        raise TypeError(f"{type(call).__name__} names no partition, group or transactional id: ask a worker")

    def partition_owner(self, topic: str, partition: int) -> int:
        return self.placement.owner(topic, partition)

    async def ask(self, call, worker: int | None = None):
        """``call``'s result from its owner (or from ``worker``); never raises."""
        target = self.owner_of(call) if worker is None else worker
        try:
            result = await self.owner(target).call(call)
        except OwnerError as exc:
            result = self._unanswered(call, exc)
        if self.moving and type(call) is not Batch and _refused(result) and isinstance(call, PARTITION_CALLS):
            moved_to = self.placement.owner(call.topic, call.partition)
            if moved_to != target:  # it moved while the call was on its way: ask where it is now
                result = await self._ask(call, moved_to)
        return result

    @staticmethod
    def _unanswered(call, exc: OwnerError):
        if exc.error != ErrorCode.not_leader_or_follower and exc.error != ErrorCode.coordinator_not_available:
            log.error("%s answered %s: %s", type(call).__name__, exc.error.name, exc)
        return call.unanswered(exc.error)

    async def _ask(self, call, worker: int):
        try:
            return await self.owner(worker).call(call)
        except OwnerError as exc:
            return self._unanswered(call, exc)

    async def ask_all(self, calls: list) -> list:
        """Each partition call's result, one ``Batch`` per owning worker, in the order of ``calls``."""
        if self.moves.asking:  # this worker is asking for a partition: its appends wait for the answer
            await self.moves.held((call.topic, call.partition) for call in calls if type(call) is Append)
        by_owner: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            by_owner.setdefault(self.owner_of(call), []).append(i)
        affinity.saw(by_owner.keys(), writes=bool(calls) and type(calls[0]) is Append)
        if self.moves.after:
            for worker, indexes in by_owner.items():
                if worker != self.index:
                    for i in indexes:
                        if type(calls[i]) is Append:
                            self.moves.forwarded(calls[i].topic, calls[i].partition, worker)
        if len(by_owner) == 1:  # the common case: one round trip, no task, the results in order already
            [worker] = by_owner
            results = list(cast(Batched, await self.ask(Batch(calls), worker)).results)
        else:
            results: list = [None] * len(calls)

            async def one(worker: int, indexes: list[int]) -> None:
                batched = cast(Batched, await self.ask(Batch([calls[i] for i in indexes]), worker))
                for i, result in zip(indexes, batched.results):
                    results[i] = result

            await asyncio.gather(*(one(worker, indexes) for worker, indexes in by_owner.items()))
        if self.moving and self.placement.moved():  # a refusal before any move was not a move's
            again = self._moved_on(calls, results, by_owner)
            if again is not None:  # once: a partition does not move twice in a round trip
                for worker, indexes in again.items():
                    batched = cast(Batched, await self.ask(Batch([calls[i] for i in indexes]), worker))
                    for i, result in zip(indexes, batched.results):
                        results[i] = result
        return results

    def _moved_on(self, calls: list, results: list, by_owner: dict[int, list[int]]) -> dict[int, list[int]] | None:
        """The calls refused by an owner the partition has left since, by where it is now (None: none)."""
        again: dict[int, list[int]] | None = None
        for worker, indexes in by_owner.items():
            for i in indexes:
                if _refused(results[i]):
                    moved_to = self.owner_of(calls[i])
                    if moved_to != worker:
                        if again is None:
                            again = {}
                        again.setdefault(moved_to, []).append(i)
        return again

    async def _ask_for(self, topic: str, partition: int, owner: int) -> bool:
        """Ask ``owner`` to hand the partition to this worker; whether it did."""
        done = cast(Done, await self._ask(MovePartition(topic, partition, self.index), owner))
        return done.error == ErrorCode.none
