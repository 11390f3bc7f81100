"""Produce (0): each partition's batches go to its owning worker, which appends
them (single writer); the answers come back in the client's order."""

import datetime
import logging

from hpbroker.protocol import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 0
log = logging.getLogger(__name__)
_VALID_ACKS = (-1, 0, 1)


def _append_time(ms: int):
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


_UNAVAILABLE = (ErrorCode.not_leader_or_follower.value, -1, -1, -1, None)


async def _append_all(ctx, work) -> list:
    """Append each partition's batches through its owner, one call per owner."""
    results, calls, slots = [], [], []
    for topic, partition, records in work:
        info = ctx.topics.get(topic, partition)
        if info is None or not 0 <= partition < info.partitions:
            results.append((ErrorCode.unknown_topic_or_partition.value, -1, -1, -1, None))
        elif records is None:
            results.append((ErrorCode.corrupt_message.value, -1, -1, -1, "no records"))
        else:
            slots.append(len(results))
            results.append(None)
            calls.append((topic, partition, records))
    answers = await ctx.call_owners("append", calls, _UNAVAILABLE)
    for slot, (topic, partition, _), answer in zip(slots, calls, answers):
        if answer is _UNAVAILABLE:
            log.warning("produce to %s-%d: its owner is unavailable (restarting?)", topic, partition)
        results[slot] = answer
    return [(ErrorCode(error), base, append_time, log_start, message)
            for error, base, append_time, log_start, message in results]


async def handle(ctx, header, request):
    acks = request.acks
    work = [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data]
    if acks not in _VALID_ACKS:
        results = [(ErrorCode.invalid_required_acks, -1, -1, -1, None)] * len(work)
    else:
        results = await _append_all(ctx, work)
    if acks == 0:
        return None  # Kafka sends no response at all
    m = response_module(API_KEY, header.api_version)
    by_topic: dict[str, list] = {}
    for (topic, partition, _), (error, base, append_time, log_start, message) in zip(work, results):
        by_topic.setdefault(topic, []).append(make(
            m.PartitionProduceResponse, index=partition, error_code=error, base_offset=base,
            log_append_time=_append_time(append_time), log_start_offset=log_start, record_errors=(),
            error_message=message))
    topics = tuple(make(m.TopicProduceResponse, name=name, partition_responses=tuple(parts))
                   for name, parts in by_topic.items())
    return make(m.ProduceResponse, responses=topics, throttle_time=NO_THROTTLE)
