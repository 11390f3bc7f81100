"""OffsetDelete (47): drop a group's committed offsets for some partitions,
unless the (live) group subscribes to the topic (GROUP_SUBSCRIBED_TO_TOPIC)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 47


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    result = await call_group(ctx, request.group_id, "offset_delete", wanted)
    error, rows = result or (ErrorCode.coordinator_not_available, [])
    by_topic: dict[str, list] = {}
    for topic, partition, e in rows:
        by_topic.setdefault(topic, []).append(
            make(m.OffsetDeleteResponsePartition, partition_index=partition, error_code=e))
    return make(m.OffsetDeleteResponse, error_code=error, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetDeleteResponseTopic, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
