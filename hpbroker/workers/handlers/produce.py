"""Produce (0): each partition's batches go to its owning worker, which appends
them (single writer); the answers come back in the client's order, written
straight to the wire (``protocol/produce_response.py``).  An acks=all answer
that must wait for the replicas is owed (``Later``): the connection handles
the producer's next request meanwhile."""

import logging

from hpbroker.errors import ErrorCode
from hpbroker.protocol import produce_response
from hpbroker.workers import eager
from hpbroker.workers.context import CloseConnection, Later
from hpbroker.workers.handlers.per_partition import ask_each
from hpbroker.workers.owner_calls import Append, AppendResult, WaitReplicated

API_KEY = 0
log = logging.getLogger(__name__)
_VALID_ACKS = (-1, 0, 1)


async def _append_all(ctx, work, acks: int) -> list:
    """Append each partition's batches through its owner, one call per owner
    (the owner checks leadership and, for acks=all, min.insync.replicas)."""
    results = [AppendResult(ErrorCode.corrupt_message, message="no records")] * len(work)
    sent = [i for i, (_, _, records) in enumerate(work) if records is not None]
    answers = await ask_each(ctx, [work[i] for i in sent],
                             lambda topic, partition, records: Append(topic, partition, records, acks))
    for i, answer in zip(sent, answers):
        results[i] = answer
    return results


async def _wait_replicated(ctx, work, results, timeout_s: float) -> list:
    """acks=all: each appended batch is answered once the high watermark passed
    it (one wait per owning worker, for those the owner did not find replicated
    already); a failure replaces its success."""
    by_owner: dict[int, list[int]] = {}
    for i, ((topic, partition, _), result) in enumerate(zip(work, results)):
        if result.error == ErrorCode.none and not result.replicated:
            by_owner.setdefault(ctx.owners.partition_owner(topic, partition), []).append(i)

    async def one(owner: int, indexes: list[int]) -> None:
        wanted = [(work[i][0], work[i][1], results[i].end_offset) for i in indexes]
        replicated = await ctx.owners.ask(WaitReplicated(wanted, int(timeout_s * 1000)), owner)
        for i, error in zip(indexes, replicated.errors):
            if error != ErrorCode.none:
                results[i] = AppendResult(error, log_start_offset=results[i].log_start_offset)

    await eager.all_of([one(owner, indexes) for owner, indexes in by_owner.items()])
    return results


async def handle(ctx, header, request):
    acks = request.acks
    work = [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data]
    if acks not in _VALID_ACKS:
        results = [AppendResult(ErrorCode.invalid_required_acks)] * len(work)
    else:
        results = await _append_all(ctx, work, acks)
        if acks == -1 and any(r.error == ErrorCode.none and not r.replicated for r in results):
            # appended: the next request may be handled while this one waits for the replicas
            return Later(_answer_replicated(ctx, header, work, results, request.timeout.total_seconds()))
    if acks == 0:
        # No response exists; a failure closes the connection, as Kafka does,
        # so the client notices (it reconnects and refreshes its metadata).
        failed = [f"{topic}-{partition}: {ErrorCode(result.error).name}"
                  for (topic, partition, _), result in zip(work, results) if result.error != ErrorCode.none]
        if failed:
            raise CloseConnection(f"an acks=0 produce failed ({', '.join(failed[:3])}"
                                  f"{', ...' if len(failed) > 3 else ''})")
        return None
    return _answer(header, work, results)


async def _answer_replicated(ctx, header, work, results, timeout_s: float) -> list[bytes]:
    return _answer(header, work, await _wait_replicated(ctx, work, results, timeout_s))


def _answer(header, work, results) -> list[bytes]:
    by_topic: dict[str, list] = {}
    for (topic, partition, _), result in zip(work, results):
        by_topic.setdefault(topic, []).append((partition, result.error, result.base_offset, result.log_append_time,
                                               result.log_start_offset, result.message))
    return [produce_response.encode(header.correlation_id, header.api_version, list(by_topic.items()))]
