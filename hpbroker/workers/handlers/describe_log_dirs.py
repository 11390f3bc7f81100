"""DescribeLogDirs (35): each log dir of this broker, with the size of every
partition in it (all, or those the request names), and its volume's total and
usable bytes (v4+).

Read from the directory tree, off the event loop: a partition's size is the
sum of its segment files (``.log``), which is what Kafka reports, and a stat
of each is all it takes, whichever worker owns the partition.  The offset
lag is Kafka's for a current (not future) log, its high watermark less its
log end, never below zero: a replica's high watermark never passes its own
log end, so it is 0.  A log dir that cannot be read answers
KAFKA_STORAGE_ERROR."""

import asyncio
import os

from hpbroker.errors import ErrorCode
from hpbroker.storage import filenames
from hpbroker.workers.handlers.per_partition import wanted_by_topic
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 35


def _partition_size(directory: str) -> int | None:
    """The bytes of the partition's segments, or None when the directory is gone."""
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if filenames.is_segment_log(entry.name):
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        pass  # deleted by retention or swapped by the cleaner meanwhile
    except FileNotFoundError:
        return None
    return total


def _describe(log_dir: str, wanted: dict[str, set[int]] | None):
    """(error, path, {topic: [(partition, size)]}, total bytes, usable bytes) of one log dir."""
    path = os.path.abspath(log_dir)
    try:
        names = sorted(os.listdir(path))
        volume = os.statvfs(path)
    except OSError:
        return ErrorCode.kafka_storage_error, path, {}, -1, -1
    topics: dict[str, list[tuple[int, int]]] = {}
    for name in names:
        parsed = filenames.parse_partition_dir(name)
        if parsed is None or (wanted is not None and parsed[1] not in wanted.get(parsed[0], ())):
            continue
        size = _partition_size(os.path.join(path, name))
        if size is not None:
            topics.setdefault(parsed[0], []).append((parsed[1], size))
    return (ErrorCode.none, path, topics, volume.f_blocks * volume.f_frsize, volume.f_bavail * volume.f_frsize)


def _describe_all(log_dirs: list[str], wanted) -> list:
    return [_describe(log_dir, wanted) for log_dir in log_dirs]


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    wanted = wanted_by_topic(request.topics, lambda t: t.topic, lambda t: t.partitions)
    described = await asyncio.to_thread(_describe_all, list(ctx.topics.log_dirs), wanted)
    results = []
    for error, path, topics, total, usable in described:
        results.append(make(m.DescribeLogDirsResult, error_code=error, log_dir=path, total_bytes=total,
                            usable_bytes=usable, topics=tuple(
                                make(m.DescribeLogDirsTopic, name=topic, partitions=tuple(
                                    make(m.DescribeLogDirsPartition, partition_index=p, partition_size=size,
                                         offset_lag=0, is_future_key=False) for p, size in sorted(parts)))
                                for topic, parts in sorted(topics.items()))))
    return make(m.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results=tuple(results))
