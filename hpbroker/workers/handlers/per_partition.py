"""What the handlers of per-partition APIs share: ask every partition's owner,
and answer topic by topic.

``ask_each`` answers a partition of an unknown topic (or beyond its partition
count) UNKNOWN_TOPIC_OR_PARTITION itself, and sends the others' calls to
their owners, one round trip per owning worker; ``by_topic`` groups the
answers back into the request's topics, in the request's order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from hpbroker.errors import ErrorCode


async def ask_each(ctx, work: list[tuple], make_call: Callable, *,
                   unknown=ErrorCode.unknown_topic_or_partition, published: Callable | None = None,
                   denied: Collection[str] = ()) -> list:
    """For each ``(topic, partition, *rest)`` of ``work``, the result of
    ``make_call(topic, partition, *rest)`` from the partition's owner; or,
    when ``published(offsets, *rest)`` makes one of what the owner published
    in the shared partition table (``ctx.partition_offsets``), that result
    without asking the owner.  A partition of a ``denied`` topic is answered
    TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not."""
    results: list = [None] * len(work)
    calls, slots = [], []
    table = ctx.partition_offsets if published is not None else None
    for i, (topic, partition, *rest) in enumerate(work):
        call = make_call(topic, partition, *rest)
        if denied and topic in denied:
            results[i] = call.unanswered(ErrorCode.topic_authorization_failed)
            continue
        info = ctx.topics.get(topic, partition)
        if info is None or not 0 <= partition < info.partitions:
            results[i] = call.unanswered(unknown)
            continue
        offsets = table.read(topic, partition) if table is not None else None
        answer = published(offsets, *rest) if offsets is not None and published is not None else None
        if answer is not None:
            results[i] = answer
        else:
            calls.append(call)
            slots.append(i)
    for slot, result in zip(slots, await ctx.owners.ask_all(calls) if calls else ()):
        results[slot] = result
    return results


def by_topic(work: Iterable[tuple], results: Iterable) -> list[tuple[str, list]]:
    """``[(topic, [(work item, result), ...]), ...]`` in the order topics first appear."""
    grouped: dict[str, list] = {}
    for item, result in zip(work, results):
        grouped.setdefault(item[0], []).append((item, result))
    return list(grouped.items())


def wanted_by_topic(topics, name: Callable, partitions: Callable) -> dict[str, set[int]] | None:
    """A request's ``topics`` as topic -> partitions asked for; None (all) when it names none."""
    if topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for topic in topics:
        wanted.setdefault(name(topic), set()).update(int(p) for p in partitions(topic))
    return wanted


def denied_topics(ctx, operation, work: Iterable[tuple]) -> frozenset[str]:
    """The topics of ``work`` (``(topic, ...)`` items) the request may not do ``operation`` on."""
    if not ctx.access.enabled:
        return frozenset()
    names = {item[0] for item in work}
    return frozenset(names - ctx.access.topics(operation, names))
