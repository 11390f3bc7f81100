"""CreateTopics (19): partition directories made by whichever worker gets the
request; a single broker means a replication factor of 1 (or -1, the default)."""

from hpbroker.protocol import ErrorCode
from hpbroker.workers.handlers.config_entries import topic_config_entries
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.topics import INVALID_REPLICATION_FACTOR, TopicError

API_KEY = 19


def _create(ctx, topic, validate_only):
    partitions = topic.num_partitions
    if topic.assignments:
        partitions = len(topic.assignments)
        if any(tuple(a.broker_ids) != (ctx.identity.broker_id,) for a in topic.assignments):
            raise TopicError(INVALID_REPLICATION_FACTOR, "replica assignments may name only this broker")
    elif partitions == -1:
        partitions = ctx.config["num.partitions"]
    if topic.replication_factor not in (-1, 1) and not topic.assignments:
        raise TopicError(INVALID_REPLICATION_FACTOR,
                         f"replication factor {topic.replication_factor} is larger than the 1 available broker")
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    return ctx.topics.create(topic.name, partitions, configs, validate_only=validate_only)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    results = []
    for topic in request.topics:
        try:
            info = _create(ctx, topic, request.validate_only)
            entries = ()
            if hasattr(m, "CreatableTopicConfigs"):  # v5+ echo the effective configs
                entries = tuple(make(m.CreatableTopicConfigs, name=name, value=value, read_only=False,
                                     config_source=source, is_sensitive=False)
                                for name, value, source, _ in topic_config_entries(ctx, info.name, info.configs))
            results.append(make(m.CreatableTopicResult, name=topic.name, topic_id=info.topic_id,
                                error_code=ErrorCode.none, error_message=None, num_partitions=info.partitions,
                                replication_factor=1, configs=entries))
        except TopicError as exc:
            results.append(make(m.CreatableTopicResult, name=topic.name, topic_id=None, error_code=ErrorCode(exc.code),
                                error_message=str(exc), num_partitions=-1, replication_factor=-1, configs=()))
    return make(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))
