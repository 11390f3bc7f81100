"""CreateTopics (19).  Standalone: partition directories made by whichever
worker gets the request, all of its topics under one registry lock; a single
broker means a replication factor of 1 (or -1, the default).  In a cluster:
replicas assigned over the live brokers (or as the request assigns them) and
written to ZooKeeper; the answer waits, up to the request's timeout, until
the controller has given every new partition a leader, so a client's next
Metadata finds them usable."""

import time
from collections import Counter

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import CLUSTER_NAME, Operation, ResourceType
from hpbroker.workers.handlers.config_entries import topic_config_entries
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.topics import TopicError

API_KEY = 19


def _checked(ctx, topic):
    """(name, partitions, configs[, factor, assignment]) for the registry, or the TopicError to answer."""
    partitions = topic.num_partitions
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    if not ctx.cluster.standalone:
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
        if partitions == -1 and not assignment:
            partitions = ctx.config["num.partitions"]
        return topic.name, partitions, configs, topic.replication_factor, assignment
    if topic.assignments:
        partitions = len(topic.assignments)
        if any(tuple(a.broker_ids) != (ctx.identity.broker_id,) for a in topic.assignments):
            return TopicError(ErrorCode.invalid_replication_factor, "replica assignments may name only this broker")
    elif partitions == -1:
        partitions = ctx.config["num.partitions"]
    if topic.replication_factor not in (-1, 1) and not topic.assignments:
        return TopicError(ErrorCode.invalid_replication_factor,
                          f"replication factor {topic.replication_factor} is larger than the 1 available broker")
    return topic.name, partitions, configs


async def _until_led(ctx, names: list[str], timeout_s: float) -> None:
    """Until every partition of ``names`` has a leader in this broker's view, or time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        waiting = [n for n in names if ctx.topics.get(n) is None or any(
            ctx.cluster.partition(n, p).leader < 0 for p in range(ctx.topics.get(n).partitions))]
        if not waiting:
            return
        await ctx.topics.changed(deadline - time.monotonic())


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    names = Counter(topic.name for topic in request.topics)
    # CREATE on the cluster, or else on each topic (Kafka's checks)
    anywhere = ctx.access.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, quiet=True)
    # a topic named twice in one request is created neither time, as in Kafka
    checked = [TopicError(ErrorCode.invalid_request, "found multiple entries for this topic") if names[topic.name] > 1
               else TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
               if not (anywhere or ctx.access.topic(Operation.CREATE, topic.name))
               else _checked(ctx, topic) for topic in request.topics]
    # All of the request's topics at once: a reader on another worker sees all or none, as in Kafka.
    made = iter(await ctx.topics.create_all([c for c in checked if not isinstance(c, TopicError)],
                                            validate_only=request.validate_only))
    outcomes = [check if isinstance(check, TopicError) else next(made) for check in checked]
    created = [o.name for o in outcomes if not isinstance(o, TopicError)]
    if created and not request.validate_only and not ctx.cluster.standalone:
        await _until_led(ctx, created, max(0.0, request.timeout.total_seconds()))
    results = []
    for topic, outcome in zip(request.topics, outcomes):
        if isinstance(outcome, TopicError):
            results.append(make(m.CreatableTopicResult, name=topic.name, topic_id=None,
                                error_code=outcome.code, error_message=str(outcome), num_partitions=-1,
                                replication_factor=-1, configs=()))
            continue
        entries = ()
        config_error = ErrorCode.none
        if hasattr(m, "CreatableTopicConfigs") and not ctx.access.topic(Operation.DESCRIBE_CONFIGS, outcome.name,
                                                                          quiet=True):
            config_error = ErrorCode.topic_authorization_failed  # created; its configs not shown
        elif hasattr(m, "CreatableTopicConfigs"):  # v5+ echo the effective configs
            entries = tuple(make(m.CreatableTopicConfigs, name=name, value=value, read_only=False,
                                 config_source=source, is_sensitive=False)
                            for name, value, source, _ in topic_config_entries(ctx, outcome.name, outcome.configs))
        results.append(make(m.CreatableTopicResult, name=topic.name, topic_id=outcome.topic_id,
                            error_code=ErrorCode.none, error_message=None, num_partitions=outcome.partitions,
                            replication_factor=_factor(ctx, outcome.name), configs=entries,
                            topic_config_error_code=config_error))
    return make(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _factor(ctx, name: str) -> int:
    view = ctx.cluster.partition(name, 0)
    return len(view.replicas) or 1
