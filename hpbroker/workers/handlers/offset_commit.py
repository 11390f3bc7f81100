"""OffsetCommit (8): checked against the group's generation and members by its
coordinator, appended to ``__consumer_offsets``, answered per partition.
Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION (as
Kafka's KafkaApis filters them before the coordinator)."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import denied_topics
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import OffsetCommit

API_KEY = 8


def known_offsets(ctx, topics) -> tuple[list[tuple], dict[tuple[str, int], ErrorCode]]:
    """A commit's rows ``(topic, partition, offset, leader epoch, metadata)`` for
    partitions that exist and whose topic the client may READ; the others
    answered UNKNOWN_TOPIC_OR_PARTITION or TOPIC_AUTHORIZATION_FAILED."""
    known, results = [], {}
    denied = denied_topics(ctx, Operation.READ, [(t.name,) for t in topics])
    for t in topics:
        info = ctx.topics.get(t.name)
        for p in t.partitions:
            if t.name in denied:
                results[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info.partitions:
                results[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                known.append((t.name, p.partition_index, p.committed_offset,
                              getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    return known, results


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    known, results = known_offsets(ctx, request.topics)
    if known:
        committed = await ctx.owners.ask(OffsetCommit(
            request.group_id, request.generation_id_or_member_epoch, request.member_id,
            getattr(request, "group_instance_id", None), known, header.api_version))
        results.update(((x.topic, x.partition), x.error) for x in committed.partitions)
    return make(m.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
            make(m.OffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=results[(t.name, p.partition_index)]) for p in t.partitions))
        for t in request.topics))
