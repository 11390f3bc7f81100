"""OffsetForLeaderEpoch (23): the end offset of the largest leader epoch at or
below the one asked about, from the partition's leader-epoch-checkpoint."""

from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import ask_each, by_topic, denied_topics
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import EpochEnd

API_KEY = 23


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.topic, p.partition, p.leader_epoch, getattr(p, "current_leader_epoch", -1))
            for t in request.topics for p in t.partitions]
    # a follower (replica id >= 0) needs CLUSTER_ACTION, a client DESCRIBE on each topic (Kafka's checks)
    if getattr(request, "replica_id", -1) >= 0:
        denied = frozenset() if ctx.access.cluster(Operation.CLUSTER_ACTION) else frozenset(w[0] for w in work)
    else:
        denied = denied_topics(ctx, Operation.DESCRIBE, work)
    results = await ask_each(ctx, work, EpochEnd, denied=denied)
    return make(m.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.OffsetForLeaderTopicResult, topic=topic, partitions=tuple(
            make(m.EpochEndOffset, error_code=r.error, partition=partition, leader_epoch=r.leader_epoch,
                 end_offset=r.end_offset) for (_, partition, *_), r in rows))
        for topic, rows in by_topic(work, results)))
