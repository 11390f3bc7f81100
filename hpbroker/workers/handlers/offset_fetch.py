"""OffsetFetch (9): committed offsets from the group's coordinator; -1 where
none is committed.  v2+ may ask for all of a group's offsets (topics null) and
have a group-level error; v8+ batch several groups; before v2 a coordinator
error is repeated on every partition."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 9


async def _fetch(ctx, group_id, topics, require_stable):
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    result = await call_group(ctx, group_id, "offset_fetch", wanted, require_stable)
    error, rows = result or (ErrorCode.coordinator_not_available, [])
    if error and wanted is not None:  # every partition answers the group's error too
        rows = [(t, p, -1, -1, "", error) for t, parts in wanted for p in parts]
    return error, rows


def _topics(m, rows, topic_cls, partition_cls):
    by_topic: dict[str, list] = {}
    for topic, partition, offset, epoch, metadata, error in rows:
        by_topic.setdefault(topic, []).append(make(
            partition_cls, partition_index=partition, committed_offset=offset, committed_leader_epoch=epoch,
            metadata=metadata, error_code=error))
    return tuple(make(topic_cls, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    require_stable = getattr(request, "require_stable", False)
    if hasattr(request, "groups"):  # v8+
        answers = await asyncio.gather(*(_fetch(ctx, g.group_id, g.topics, require_stable) for g in request.groups))
        return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(
            make(m.OffsetFetchResponseGroup, group_id=g.group_id, error_code=error,
                 topics=_topics(m, rows, m.OffsetFetchResponseTopics, m.OffsetFetchResponsePartitions))
            for g, (error, rows) in zip(request.groups, answers)))
    error, rows = await _fetch(ctx, request.group_id, request.topics, require_stable)
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=error,
                topics=_topics(m, rows, m.OffsetFetchResponseTopic, m.OffsetFetchResponsePartition))
