"""CreatePartitions (37): more partitions for a topic (never fewer), their
replicas as the request assigns them (checked as Kafka does) or spread over
the live brokers."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.topics import TopicError

API_KEY = 37


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    results = []
    for topic in request.topics:
        assignments = [list(a.broker_ids) for a in topic.assignments] if topic.assignments else None
        if not ctx.access.topic(Operation.ALTER, topic.name):
            results.append(make(m.CreatePartitionsTopicResult, name=topic.name,
                                error_code=ErrorCode.topic_authorization_failed,
                                error_message="ALTER on this topic is not allowed"))
            continue
        try:
            await ctx.topics.add_partitions(topic.name, topic.count, validate_only=request.validate_only,
                                            assignments=assignments)
            results.append(make(m.CreatePartitionsTopicResult, name=topic.name, error_code=ErrorCode.none,
                                error_message=None))
        except TopicError as exc:
            results.append(make(m.CreatePartitionsTopicResult, name=topic.name, error_code=exc.code,
                                error_message=str(exc)))
    return make(m.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
