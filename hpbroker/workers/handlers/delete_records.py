"""DeleteRecords (21): move a partition's log start up (-1: to the high
watermark); whole segments below it are deleted by its owner."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.partitions import DeletedRecords
from hpbroker.workers.peers import PeerUnavailable

API_KEY = 21


async def _one(ctx, topic, p):
    info = ctx.topics.get(topic, p.partition_index)
    if info is None or not 0 <= p.partition_index < info.partitions:
        return DeletedRecords(ErrorCode.unknown_topic_or_partition)
    try:
        return await ctx.call_owner(topic, p.partition_index, "delete_records", p.offset)
    except PeerUnavailable:
        return DeletedRecords(ErrorCode.not_leader_or_follower)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.name, p) for t in request.topics for p in t.partitions]
    results = await asyncio.gather(*(_one(ctx, topic, p) for topic, p in work))
    by_topic: dict[str, list] = {}
    for (topic, p), result in zip(work, results):
        by_topic.setdefault(topic, []).append(make(m.DeleteRecordsPartitionResult, partition_index=p.partition_index,
                                                   low_watermark=result.low_watermark, error_code=result.error))
    return make(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.DeleteRecordsTopicResult, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
