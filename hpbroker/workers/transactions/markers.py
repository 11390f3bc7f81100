"""Writing transaction markers, and asking a transaction's coordinator, across
workers and brokers.

* ``write_here``: markers for partitions this broker leads, each written by
  its owning worker and answered once replicated (Kafka writes markers with
  acks=all: a marker a new leader lacks would leave its transaction open);
  ``replicated`` is its second half, for a caller that answers it later.
* ``write_there``: the same for partitions another broker leads, as Kafka's
  WriteTxnMarkers request to that broker, which answers them with
  ``write_here``.
* ``verify``: whether partitions are in a producer's ongoing transaction,
  asked of the transactional id's coordinator, on this broker (an owner call)
  or on another (AddPartitionsToTxn v4, ``verify_only``).

Markers and verifications go to another broker on connections of their own
(``lane``): a marker waiting for a slow replica must not hold up a produce's
verification behind it.
"""

from __future__ import annotations

import asyncio

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i16, i32

from hpbroker.errors import ErrorCode
from hpbroker.workers.broker_clients import BrokerUnreachable
from hpbroker.workers.owner_calls import (
    AddTxnPartitions,
    AppendResult,
    PartitionError,
    TxnPartitionsResult,
    WaitReplicated,
    WriteMarker,
)

REPLICATION_TIMEOUT_MS = 30_000
REMOTE_TIMEOUT_S = 35.0


async def write_here(owners, markers: list[WriteMarker], timeout_ms: int = REPLICATION_TIMEOUT_MS) -> list[ErrorCode]:
    """Each marker's error: none once written and replicated."""
    return await replicated(owners, markers, await owners.ask_all(markers) if markers else [], timeout_ms)


async def replicated(owners, markers: list[WriteMarker], results: list[AppendResult],
                     timeout_ms: int = REPLICATION_TIMEOUT_MS) -> list[ErrorCode]:
    """Each written marker's error once its replicas have it (``results``: what the writes answered)."""
    errors = [r.error for r in results]
    waiting: dict[int, list[int]] = {}
    for i, (marker, result) in enumerate(zip(markers, results)):
        if result.error == ErrorCode.none and not result.replicated:
            waiting.setdefault(owners.partition_owner(marker.topic, marker.partition), []).append(i)

    async def wait(owner: int, indexes: list[int]) -> None:
        items = [(markers[i].topic, markers[i].partition, results[i].end_offset) for i in indexes]
        replicated = await owners.ask(WaitReplicated(items, timeout_ms), owner)
        for i, error in zip(indexes, replicated.errors):
            errors[i] = error

    await asyncio.gather(*(wait(owner, indexes) for owner, indexes in waiting.items()))
    return errors


async def write_there(clients, broker_id: int, markers: list[WriteMarker]) -> list[ErrorCode]:
    """The markers (one transaction's: same producer, epoch and outcome) sent
    to the broker leading their partitions; each one's error."""
    first = markers[0]
    by_topic = _by_topic((m.topic, m.partition) for m in markers)
    request = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=ProducerId(first.producer_id), producer_epoch=i16(first.producer_epoch),
        transaction_result=first.commit, coordinator_epoch=i32(first.coordinator_epoch),
        topics=tuple(WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                     for t, ps in by_topic.items())),))
    try:
        response = await clients.send(broker_id, request, REMOTE_TIMEOUT_S, lane="markers")
    except BrokerUnreachable:
        return [ErrorCode.not_leader_or_follower] * len(markers)  # retried once the image says more
    found = {(t.name, int(p.partition_index)): p.error_code for answer in response.markers for t in answer.topics
             for p in t.partitions}
    return [found.get((m.topic, m.partition), ErrorCode.unknown_server_error) for m in markers]


async def verify(ctx, call: AddTxnPartitions) -> TxnPartitionsResult:
    """The coordinator's answer to a ``verify_only`` call, wherever it is."""
    where = ctx.transactions.coordinator_broker(call.transactional_id)
    if where is None:
        return await ctx.owners.ask(call)
    if where < 0:
        return call.unanswered(ErrorCode.coordinator_not_available)
    by_topic = _by_topic(call.partitions)
    request = AddPartitionsToTxnRequest(transactions=(AddPartitionsToTxnTransaction(
        transactional_id=TransactionalId(call.transactional_id), producer_id=ProducerId(call.producer_id),
        producer_epoch=i16(call.producer_epoch), verify_only=True,
        topics=tuple(AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(i32(p) for p in ps))
                     for t, ps in by_topic.items())),))
    try:
        response = await ctx.transactions.broker_clients.send(where, request, REMOTE_TIMEOUT_S, lane="verify")
    except BrokerUnreachable:
        return call.unanswered(ErrorCode.coordinator_not_available)
    if response.error_code != ErrorCode.none:
        return call.unanswered(response.error_code)
    found = {(t.name, int(p.partition_index)): p.partition_error_code for r in response.results_by_transaction
             for t in r.topic_results for p in t.results_by_partition}
    return TxnPartitionsResult(ErrorCode.none, [PartitionError(t, p, found.get((t, p), ErrorCode.invalid_txn_state))
                                                for t, p in call.partitions])


def _by_topic(partitions) -> dict[str, list[int]]:
    """(topic, partition) pairs as topic -> partitions, in the order topics first appear."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped
