"""OffsetDelete (47): drop a group's committed offsets for some partitions,
unless the (live) group subscribes to the topic (GROUP_SUBSCRIBED_TO_TOPIC)."""

from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import OffsetDelete

API_KEY = 47


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    deleted = await ctx.owners.ask(OffsetDelete(request.group_id, [(t.name, p.partition_index) for t in request.topics
                                                                   for p in t.partitions]))
    by_topic: dict[str, list] = {}
    for x in deleted.partitions:
        by_topic.setdefault(x.topic, []).append(
            make(m.OffsetDeleteResponsePartition, partition_index=x.partition, error_code=x.error))
    return make(m.OffsetDeleteResponse, error_code=deleted.error, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetDeleteResponseTopic, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
