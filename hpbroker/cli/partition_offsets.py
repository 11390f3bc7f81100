"""Offsets of partitions through the ListOffsets API: earliest, latest, or the
first offset at or after a timestamp, for many partitions in one go."""

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from hpbroker.cli.connection import CliError, result


def list_offsets(admin, partitions, spec: OffsetSpec, timeout: float) -> dict:
    """``{(topic, partition): offset}``; -1 where the broker has no such offset
    (a timestamp after the last record)."""
    if not partitions:
        return {}
    asked = {TopicPartition(t, p): spec for t, p in partitions}
    futures = admin.list_offsets(asked, request_timeout=timeout)
    return {(tp.topic, tp.partition): result(f, timeout, f"{tp.topic}[{tp.partition}]").offset
            for tp, f in futures.items()}


def earliest_latest(admin, partitions, timeout: float) -> tuple[dict, dict]:
    # confluent-kafka annotates its spec singletons Optional, though they are set at import
    return (list_offsets(admin, partitions, OffsetSpec.earliest(), timeout),  # pyright: ignore[reportArgumentType]
            list_offsets(admin, partitions, OffsetSpec.latest(), timeout))  # pyright: ignore[reportArgumentType]


def at_time(admin, partitions, ms: int, timeout: float) -> dict:
    return list_offsets(admin, partitions, OffsetSpec.for_timestamp(ms), timeout)


def topic_partitions(admin, topics, timeout: float) -> list[tuple[str, int]]:
    """Every partition of these topics (from Metadata), sorted; an unknown topic is a CliError."""
    metadata = admin.list_topics(timeout=timeout)
    found = []
    for topic in topics:
        meta = metadata.topics.get(topic)
        if meta is None or (meta.error is not None and not meta.partitions):
            raise CliError(f"topic {topic!r} does not exist")
        found += [(topic, p) for p in sorted(meta.partitions)]
    return found
