"""DeleteTopics (20).  Standalone: each partition's owner removes its log (it
may have it open); then the topic's config overrides go.  In a cluster: the
topic is marked in ``/admin/delete_topics`` for the controller, which removes
its znodes; every replica deletes its log when its image drops the topic.
The answer waits, up to the request's timeout, until this broker's view no
longer has the topic."""

import time

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import DeletePartition
from hpbroker.workers.topics import TopicError

API_KEY = 20


async def _delete_in_cluster(ctx, info, deadline: float):
    try:
        await ctx.topics.delete(info.name)
    except TopicError as exc:
        return info.name, info.topic_id, exc.code, str(exc)
    while ctx.topics.get(info.name) is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return info.name, info.topic_id, ErrorCode.request_timed_out, "the controller has not deleted it yet"
        await ctx.topics.changed(remaining)
    return info.name, info.topic_id, ErrorCode.none, None


async def _delete(ctx, name, topic_id, deadline: float):
    info = ctx.topics.get(name) if name else ctx.topics.by_id(topic_id)
    known = info.name if info is not None else name
    # Kafka's checks: DESCRIBE (whether it exists is not told without it), then DELETE
    if known is not None and not (ctx.access.topic(Operation.DESCRIBE, known)
                                  and ctx.access.topic(Operation.DELETE, known)):
        return (name, topic_id, ErrorCode.topic_authorization_failed,
                "DELETE on this topic is not allowed")
    if info is None:
        error = ErrorCode.unknown_topic_or_partition if name else ErrorCode.unknown_topic_id
        return name, topic_id, error, "no such topic"
    if not ctx.config["delete.topic.enable"]:
        return info.name, info.topic_id, ErrorCode.topic_deletion_disabled, "delete.topic.enable is false"
    if not ctx.cluster.standalone:
        return await _delete_in_cluster(ctx, info, deadline)
    done = await ctx.owners.ask_all([DeletePartition(info.name, p) for p in range(info.partitions)])
    failed = [p for p, d in enumerate(done) if d.error != ErrorCode.none]
    if failed:
        return info.name, info.topic_id, ErrorCode.request_timed_out, f"partitions {failed} could not be deleted yet"
    ctx.topics.forget_configs(info.name)
    return info.name, info.topic_id, ErrorCode.none, None


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    if hasattr(request, "topics"):  # v6+: by name or by id
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    deadline = time.monotonic() + request.timeout.total_seconds()
    results = [await _delete(ctx, name, topic_id, deadline) for name, topic_id in wanted]
    return make(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(
        make(m.DeletableTopicResult, name=name, topic_id=topic_id, error_code=error, error_message=message)
        for name, topic_id, error, message in results))
