"""OffsetDelete (47): drop a group's committed offsets for some partitions,
unless the (live) group subscribes to the topic (GROUP_SUBSCRIBED_TO_TOPIC)."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import denied_topics
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import OffsetDelete

API_KEY = 47


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    known, unknown, denied = [], [], []
    refused = denied_topics(ctx, Operation.READ, [(t.name,) for t in request.topics])
    for t in request.topics:
        info = ctx.topics.get(t.name)
        for p in t.partitions:
            exists = info is not None and 0 <= p.partition_index < info.partitions
            (denied if t.name in refused else known if exists else unknown).append((t.name, p.partition_index))
    deleted = await ctx.owners.ask(OffsetDelete(request.group_id, known))
    # partitions of topics that do not exist (or may not be read) are answered here, as Kafka's KafkaApis does
    rows = [(x.topic, x.partition, x.error) for x in deleted.partitions]
    if deleted.error == ErrorCode.none:
        rows += [(topic, p, ErrorCode.unknown_topic_or_partition) for topic, p in unknown]
        rows += [(topic, p, ErrorCode.topic_authorization_failed) for topic, p in denied]
    by_topic: dict[str, list] = {}
    for topic, partition, error in rows:
        by_topic.setdefault(topic, []).append(
            make(m.OffsetDeleteResponsePartition, partition_index=partition, error_code=error))
    return make(m.OffsetDeleteResponse, error_code=deleted.error, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetDeleteResponseTopic, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
