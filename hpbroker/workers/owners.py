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
  sends partition calls as one ``Batch`` per owning worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol, cast

from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import DEFAULT_TRANSACTION_PARTITIONS, group_owner, partition_owner, txn_owner
from hpbroker.workers import affinity
from hpbroker.workers.owner_calls import (
    GROUP_CALLS,
    PARTITION_CALLS,
    TXN_CALLS,
    Batch,
    Batched,
    Failed,
    ListGroups,
    ListTxns,
    OwnerError,
    WaitReplicated,
)
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


def _unreachable(call) -> ErrorCode:
    """What a client is told when the owner of ``call`` cannot be reached."""
    if isinstance(call, WaitReplicated):
        return ErrorCode.request_timed_out  # appended, but nobody can say it is replicated
    if isinstance(call, GROUP_CALLS + TXN_CALLS + (ListGroups, ListTxns)):
        return ErrorCode.coordinator_not_available
    return ErrorCode.not_leader_or_follower


class Owners:
    def __init__(self, index: int, workers: int, local: LocalOwner, peers, offsets_partitions: int,
                 txn_partitions: int = DEFAULT_TRANSACTION_PARTITIONS):
        self.index = index
        self.workers = workers
        self.local = local
        self.peers = peers
        self.offsets_partitions = offsets_partitions  # offsets.topic.num.partitions: where a group lives
        self.txn_partitions = txn_partitions  # transaction.state.log.num.partitions: where a transactional id lives
        self._remote = {worker: PeerOwner(peers, worker) for worker in range(workers) if worker != index}

    def owner(self, worker: int) -> Owner:
        return self.local if worker == self.index else self._remote[worker]

    def owner_of(self, call) -> int:
        """The worker owning the partition, group or transactional id ``call`` is about."""
        if isinstance(call, PARTITION_CALLS):
            return partition_owner(call.topic, call.partition, self.workers)
        if isinstance(call, GROUP_CALLS):
            return group_owner(call.group_id or "", self.workers, self.offsets_partitions)
        if isinstance(call, TXN_CALLS):
            return txn_owner(call.transactional_id, self.workers, self.txn_partitions)
        raise TypeError(f"{type(call).__name__} names no partition, group or transactional id: ask a worker")

    def partition_owner(self, topic: str, partition: int) -> int:
        return partition_owner(topic, partition, self.workers)

    async def ask(self, call, worker: int | None = None):
        """``call``'s result from its owner (or from ``worker``); never raises."""
        try:
            return await self.owner(self.owner_of(call) if worker is None else worker).call(call)
        except OwnerError as exc:
            if exc.error != ErrorCode.not_leader_or_follower and exc.error != ErrorCode.coordinator_not_available:
                log.error("%s answered %s: %s", type(call).__name__, exc.error.name, exc)
            return call.unanswered(exc.error)

    async def ask_all(self, calls: list) -> list:
        """Each partition call's result, one ``Batch`` per owning worker, in the order of ``calls``."""
        by_owner: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            by_owner.setdefault(self.owner_of(call), []).append(i)
        affinity.saw(by_owner.keys())
        if len(by_owner) == 1:  # the common case: one round trip, no task, the results in order already
            [worker] = by_owner
            return list(cast(Batched, await self.ask(Batch(calls), worker)).results)
        results: list = [None] * len(calls)

        async def one(worker: int, indexes: list[int]) -> None:
            batched = cast(Batched, await self.ask(Batch([calls[i] for i in indexes]), worker))
            for i, result in zip(indexes, batched.results):
                results[i] = result

        await asyncio.gather(*(one(worker, indexes) for worker, indexes in by_owner.items()))
        return results
