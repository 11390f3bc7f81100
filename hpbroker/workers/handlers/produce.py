"""Produce (0): each partition's batches go to its owning worker, which appends
them (single writer); the answers come back in the client's order."""

import datetime
import logging

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.partitions import AppendResult

API_KEY = 0
log = logging.getLogger(__name__)
_VALID_ACKS = (-1, 0, 1)


def _append_time(ms: int):
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


_UNAVAILABLE = AppendResult(ErrorCode.not_leader_or_follower)


# A standalone broker's every partition has one replica, so its ISR is one.
IN_SYNC_REPLICAS = 1


async def _append_all(ctx, work, acks: int) -> list:
    """Append each partition's batches through its owner, one call per owner."""
    results, calls, slots = [], [], []
    for topic, partition, records in work:
        info = ctx.topics.get(topic, partition)
        if info is None or not 0 <= partition < info.partitions:
            results.append(AppendResult(ErrorCode.unknown_topic_or_partition))
        elif acks == -1 and ctx.topics.config_for(topic).min_insync_replicas > IN_SYNC_REPLICAS:
            # as Kafka: acks=all is refused, before appending, while fewer
            # replicas are in sync than the topic's min.insync.replicas
            results.append(AppendResult(ErrorCode.not_enough_replicas, message=(
                f"{topic}-{partition} has {IN_SYNC_REPLICAS} in-sync replica, below min.insync.replicas")))
        elif records is None:
            results.append(AppendResult(ErrorCode.corrupt_message, message="no records"))
        else:
            slots.append(len(results))
            results.append(None)
            calls.append((topic, partition, records))
    answers = await ctx.call_owners("append", calls, _UNAVAILABLE)
    for slot, (topic, partition, _), answer in zip(slots, calls, answers):
        if answer is _UNAVAILABLE:
            log.warning("produce to %s-%d: its owner is unavailable (restarting?)", topic, partition)
        results[slot] = answer
    return results


async def handle(ctx, header, request):
    acks = request.acks
    work = [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data]
    if acks not in _VALID_ACKS:
        results = [AppendResult(ErrorCode.invalid_required_acks)] * len(work)
    else:
        results = await _append_all(ctx, work, acks)
    if acks == 0:
        return None  # Kafka sends no response at all
    m = response_module(API_KEY, header.api_version)
    by_topic: dict[str, list] = {}
    for (topic, partition, _), result in zip(work, results):
        by_topic.setdefault(topic, []).append(make(
            m.PartitionProduceResponse, index=partition, error_code=result.error, base_offset=result.base_offset,
            log_append_time=_append_time(result.log_append_time), log_start_offset=result.log_start_offset,
            record_errors=(), error_message=result.message))
    topics = tuple(make(m.TopicProduceResponse, name=name, partition_responses=tuple(parts))
                   for name, parts in by_topic.items())
    return make(m.ProduceResponse, responses=topics, throttle_time=NO_THROTTLE)
