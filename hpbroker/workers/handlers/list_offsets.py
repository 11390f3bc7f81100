"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest
local (-4), latest tiered (-5, = latest here) or the first offset at or after a
timestamp, each answered by the partition's owner."""

from hpbroker.workers.handlers.per_partition import ask_each, by_topic
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import ListOffset

API_KEY = 2


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1))
            for t in request.topics for p in t.partitions]
    results = await ask_each(ctx, work, ListOffset)
    return make(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.ListOffsetsTopicResponse, name=topic, partitions=tuple(
            make(m.ListOffsetsPartitionResponse, partition_index=partition, error_code=r.error, timestamp=r.timestamp,
                 offset=r.offset, leader_epoch=r.leader_epoch, old_style_offsets=(r.offset,))
            for (_, partition, *_), r in rows))
        for topic, rows in by_topic(work, results)))
