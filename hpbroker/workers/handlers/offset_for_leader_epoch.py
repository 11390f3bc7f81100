"""OffsetForLeaderEpoch (23): the end offset of the largest leader epoch at or
below the one asked about, from the partition's leader-epoch-checkpoint."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.partitions import EpochEndOffset
from hpbroker.workers.peers import PeerUnavailable

API_KEY = 23


async def _one(ctx, topic, p):
    info = ctx.topics.get(topic, p.partition)
    if info is None or not 0 <= p.partition < info.partitions:
        return EpochEndOffset(ErrorCode.unknown_topic_or_partition)
    try:
        return await ctx.call_owner(topic, p.partition, "end_offset_for_epoch", p.leader_epoch,
                                    getattr(p, "current_leader_epoch", -1))
    except PeerUnavailable:
        return EpochEndOffset(ErrorCode.not_leader_or_follower)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.topic, p) for t in request.topics for p in t.partitions]
    results = await asyncio.gather(*(_one(ctx, topic, p) for topic, p in work))
    by_topic: dict[str, list] = {}
    for (topic, p), result in zip(work, results):
        by_topic.setdefault(topic, []).append(make(m.EpochEndOffset, error_code=result.error, partition=p.partition,
                                                   leader_epoch=result.leader_epoch, end_offset=result.end_offset))
    return make(m.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetForLeaderTopicResult, topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
