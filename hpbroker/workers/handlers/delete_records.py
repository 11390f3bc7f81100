"""DeleteRecords (21): move a partition's log start up (-1: to the high
watermark); whole segments below it are deleted by its owner, and the answer
waits (up to the request's timeout) until every in-sync replica moved too."""

from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import ask_each, by_topic, denied_topics
from hpbroker.workers.kio_build import NO_THROTTLE, make, millis, response_module
from hpbroker.workers.owner_calls import DeleteRecords

API_KEY = 21


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    timeout_ms = millis(request.timeout)
    work = [(t.name, p.partition_index, p.offset) for t in request.topics for p in t.partitions]
    results = await ask_each(ctx, work, lambda topic, partition, offset: DeleteRecords(topic, partition, offset,
                                                                                        timeout_ms),
                             denied=denied_topics(ctx, Operation.DELETE, work))
    return make(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.DeleteRecordsTopicResult, name=topic, partitions=tuple(
            make(m.DeleteRecordsPartitionResult, partition_index=partition, low_watermark=r.low_watermark,
                 error_code=r.error) for (_, partition, _), r in rows))
        for topic, rows in by_topic(work, results)))
