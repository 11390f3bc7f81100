"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest
local (-4), latest tiered (-5, = latest here) or the first offset at or after a
timestamp, each answered by the partition's owner."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.partitions import ListedOffset
from hpbroker.workers.peers import PeerUnavailable

API_KEY = 2


async def _one(ctx, topic, partition):
    info = ctx.topics.get(topic, partition.partition_index)
    if info is None or not 0 <= partition.partition_index < info.partitions:
        return ListedOffset(ErrorCode.unknown_topic_or_partition)
    try:
        return await ctx.call_owner(topic, partition.partition_index, "list_offset", partition.timestamp)
    except PeerUnavailable:
        return ListedOffset(ErrorCode.not_leader_or_follower)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.name, p) for t in request.topics for p in t.partitions]
    results = await asyncio.gather(*(_one(ctx, topic, p) for topic, p in work))
    by_topic: dict[str, list] = {}
    for (topic, p), listed in zip(work, results):
        by_topic.setdefault(topic, []).append(make(
            m.ListOffsetsPartitionResponse, partition_index=p.partition_index, error_code=listed.error,
            timestamp=listed.timestamp, offset=listed.offset, leader_epoch=listed.leader_epoch,
            old_style_offsets=(listed.offset,)))
    topics = tuple(make(m.ListOffsetsTopicResponse, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return make(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=topics)
