"""OffsetFetch (9): committed offsets from the group's coordinator; -1 where
none is committed.  v2+ may ask for all of a group's offsets (topics null) and
have a group-level error; v8+ batch several groups; before v2 a coordinator
error is repeated on every partition."""

import asyncio

import msgspec

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import denied_topics
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import FetchedOffset, FetchedOffsets, OffsetFetch

API_KEY = 9


async def _fetch(ctx, group_id, topics, require_stable):
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    if not ctx.access.group(Operation.DESCRIBE, group_id):
        return OffsetFetch(group_id, wanted).unanswered(ErrorCode.group_authorization_failed)
    denied = denied_topics(ctx, Operation.DESCRIBE, wanted or ())
    asked = wanted if not denied else [(topic, parts) for topic, parts in wanted or () if topic not in denied]
    fetched = await ctx.owners.ask(OffsetFetch(group_id, asked, require_stable)) if asked != [] else FetchedOffsets(
        ErrorCode.none)
    if fetched.error and wanted is not None:  # every partition answers the group's error too
        return OffsetFetch(group_id, wanted).unanswered(fetched.error)
    if ctx.access.enabled:
        if wanted is None:  # all the group's offsets: those of topics it may not describe left out
            described = ctx.access.topics(Operation.DESCRIBE, {x.topic for x in fetched.partitions}, quiet=True)
            fetched = msgspec.structs.replace(
                fetched, partitions=[x for x in fetched.partitions if x.topic in described])
        elif denied:  # in the order asked, the denied ones answered TOPIC_AUTHORIZATION_FAILED
            found = {(x.topic, x.partition): x for x in fetched.partitions}
            fetched = msgspec.structs.replace(fetched, partitions=[found.get((topic, p)) or FetchedOffset(
                topic, p, error=ErrorCode.topic_authorization_failed) for topic, parts in wanted for p in parts])
    return fetched


def _topics(rows, topic_cls, partition_cls):
    by_topic: dict[str, list] = {}
    for x in rows:
        by_topic.setdefault(x.topic, []).append(make(
            partition_cls, partition_index=x.partition, committed_offset=x.offset,
            committed_leader_epoch=x.leader_epoch, metadata=x.metadata, error_code=x.error))
    return tuple(make(topic_cls, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    require_stable = getattr(request, "require_stable", False)
    if hasattr(request, "groups"):  # v8+
        answers = await asyncio.gather(*(_fetch(ctx, g.group_id, g.topics, require_stable) for g in request.groups))
        return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(
            make(m.OffsetFetchResponseGroup, group_id=g.group_id, error_code=fetched.error,
                 topics=_topics(fetched.partitions, m.OffsetFetchResponseTopics, m.OffsetFetchResponsePartitions))
            for g, fetched in zip(request.groups, answers)))
    fetched = await _fetch(ctx, request.group_id, request.topics, require_stable)
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=fetched.error,
                topics=_topics(fetched.partitions, m.OffsetFetchResponseTopic, m.OffsetFetchResponsePartition))
