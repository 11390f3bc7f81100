"""CreateTopics (19): partition directories made by whichever worker gets the
request, all of its topics under one registry lock; a single broker means a
replication factor of 1 (or -1, the default)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.config_entries import topic_config_entries
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.topics import TopicError

API_KEY = 19


def _checked(ctx, topic):
    """(name, partitions, configs) for the registry, or the TopicError to answer."""
    partitions = topic.num_partitions
    if topic.assignments:
        partitions = len(topic.assignments)
        if any(tuple(a.broker_ids) != (ctx.identity.broker_id,) for a in topic.assignments):
            return TopicError(ErrorCode.invalid_replication_factor, "replica assignments may name only this broker")
    elif partitions == -1:
        partitions = ctx.config["num.partitions"]
    if topic.replication_factor not in (-1, 1) and not topic.assignments:
        return TopicError(ErrorCode.invalid_replication_factor,
                          f"replication factor {topic.replication_factor} is larger than the 1 available broker")
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    return topic.name, partitions, configs


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    checked = [_checked(ctx, topic) for topic in request.topics]
    # All of the request's topics at once: a reader on another worker sees all or none, as in Kafka.
    made = iter(ctx.topics.create_all([c for c in checked if not isinstance(c, TopicError)],
                                      validate_only=request.validate_only))
    results = []
    for topic, check in zip(request.topics, checked):
        outcome = check if isinstance(check, TopicError) else next(made)
        if isinstance(outcome, TopicError):
            results.append(make(m.CreatableTopicResult, name=topic.name, topic_id=None,
                                error_code=outcome.code, error_message=str(outcome), num_partitions=-1,
                                replication_factor=-1, configs=()))
            continue
        entries = ()
        if hasattr(m, "CreatableTopicConfigs"):  # v5+ echo the effective configs
            entries = tuple(make(m.CreatableTopicConfigs, name=name, value=value, read_only=False,
                                 config_source=source, is_sensitive=False)
                            for name, value, source, _ in topic_config_entries(ctx, outcome.name, outcome.configs))
        results.append(make(m.CreatableTopicResult, name=topic.name, topic_id=outcome.topic_id,
                            error_code=ErrorCode.none, error_message=None, num_partitions=outcome.partitions,
                            replication_factor=1, configs=entries))
    return make(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))
