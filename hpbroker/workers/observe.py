"""What a worker reports to the metrics, kept out of the request paths' code:
request counts and latencies by API, and every few seconds the gauges of the
partitions it owns and the lag of the groups it coordinates.

prometheus-client's multiprocess mode writes every increment through a lock
into a memory-mapped file (about 4 us each, and a produce request makes
five), so what the request paths count is added up here in plain dicts and
lists and written out once a second (``flush``; and at a worker's stop): a
scrape may be a second behind, a SIGKILLed worker loses its last second of
counts, no request pays for the file.  A latency is counted in its bucket
here too, and the flush hands the counts and their sum over at once
(``metrics.SummedHistogram``).
"""

import asyncio
import bisect
import logging
import threading
import time

from hpbroker.protocol.schemas import request_type
from hpbroker.server import metrics
from hpbroker.storage import stats
from hpbroker.workers.owner_calls import PartitionBounds

log = logging.getLogger(__name__)

GAUGE_INTERVAL_S = 5.0
FLUSH_INTERVAL_S = 1.0
_API_NAMES: dict[tuple[int, int], str] = {}
_LATENCY_BOUNDS = metrics.REQUEST_SECONDS.bounds  # ascending, +Inf last
# what is counted but not yet written: API name -> requests; topic -> bytes, records
_requests: dict[str, int] = {}
_bytes_in: dict[str, int] = {}
_records_in: dict[str, int] = {}
_bytes_out: dict[str, int] = {}
_peer_payloads: dict[str, int] = {}  # "arena" or "inline" -> bytes sent to other workers that way
_latencies: dict[str, list] = {}  # API name -> [seconds summed, count of bucket 0, bucket 1, ...]
# the segment fsyncs' [seconds summed, count of bucket 0, ...]: a flush.messages=1 produce makes one,
# on the loop or on the storage thread (hence the lock)
_FSYNC_BOUNDS = metrics.FSYNC_SECONDS.bounds
_fsyncs: list = [0.0] + [0] * len(_FSYNC_BOUNDS)
_fsyncs_lock = threading.Lock()


def install() -> None:
    stats.fsync_observer = fsync_done


def fsync_done(seconds: float) -> None:
    with _fsyncs_lock:
        _fsyncs[0] += seconds
        _fsyncs[1 + bisect.bisect_left(_FSYNC_BOUNDS, seconds)] += 1


def api_name(api_key: int, api_version: int) -> str:
    name = _API_NAMES.get((api_key, api_version))
    if name is None:
        cls = request_type(api_key, api_version)
        name = cls.__name__.removesuffix("Request") if cls is not None else str(api_key)
        _API_NAMES[(api_key, api_version)] = name
    return name


def request_done(api_key: int, api_version: int, started: float) -> None:
    name = api_name(api_key, api_version)
    _requests[name] = _requests.get(name, 0) + 1
    seconds = time.perf_counter() - started
    counts = _latencies.get(name)
    if counts is None:
        counts = _latencies[name] = [0.0] + [0] * len(_LATENCY_BOUNDS)
    counts[0] += seconds
    counts[1 + bisect.bisect_left(_LATENCY_BOUNDS, seconds)] += 1  # the first bucket whose bound it is within


def appended(topic: str, size: int, records: int) -> None:
    _bytes_in[topic] = _bytes_in.get(topic, 0) + size
    _records_in[topic] = _records_in.get(topic, 0) + records


def fetched(topic: str, size: int) -> None:
    _bytes_out[topic] = _bytes_out.get(topic, 0) + size


def peer_payload(path: str, size: int) -> None:
    _peer_payloads[path] = _peer_payloads.get(path, 0) + size


def partition_moved() -> None:
    metrics.PARTITIONS_MOVED.inc()  # rare (a partition moves at most every few seconds): no batching


def flush() -> None:
    """Write what was counted since the last flush to the metric files: the
    fsyncs and latencies first, the requests and records last, so that a
    scrape that finds a record counted also finds the fsync made before its
    answer (a scrape may come between the writes of one flush)."""
    with _fsyncs_lock:
        seconds, *buckets = _fsyncs
        _fsyncs[:] = [0.0] + [0] * len(buckets)
    if any(buckets):
        metrics.FSYNC_SECONDS.add((), seconds, buckets)
    latencies = list(_latencies.items())
    _latencies.clear()
    for name, (seconds, *buckets) in latencies:
        metrics.REQUEST_SECONDS.add((name,), seconds, buckets)
    for counts, counter in ((_requests, metrics.REQUESTS), (_bytes_in, metrics.BYTES_IN),
                            (_records_in, metrics.RECORDS_IN), (_bytes_out, metrics.BYTES_OUT),
                            (_peer_payloads, metrics.PEER_PAYLOAD_BYTES)):
        pending = list(counts.items())
        counts.clear()
        for label, amount in pending:
            counter.labels(label).inc(amount)


async def flush_forever() -> None:
    while True:
        await asyncio.sleep(FLUSH_INTERVAL_S)
        try:
            flush()
        except Exception:  # metrics must never take a worker down
            log.exception("writing the request counters failed")


def partition_gauges(logs) -> None:
    for (topic, partition), partition_log in logs.logs().items():
        labels = (topic, str(partition))
        metrics.LOG_END_OFFSET.labels(*labels).set(partition_log.written_offset)
        metrics.LOG_FLUSHED_OFFSET.labels(*labels).set(partition_log.flushed_offset)
        metrics.LOG_START_OFFSET.labels(*labels).set(partition_log.log_start_offset)
        segments = partition_log.segments
        metrics.LOG_SEGMENTS.labels(*labels).set(len(segments))
        metrics.LOG_SIZE.labels(*labels).set(sum(s.size for s in segments))


async def group_lag(ctx, coordinator) -> None:
    """Committed offset against the log end, for every group this worker coordinates."""
    wanted = [(group, topic, partition, value.offset)
              for group in coordinator.offsets.groups()
              for (topic, partition), value in coordinator.offsets.of_group(group).items()]
    ends = await ctx.owners.ask_all([PartitionBounds(t, p) for _, t, p, _ in wanted]) if wanted else []
    for (group, topic, partition, committed), end in zip(wanted, ends):
        if end.error:  # owner away, or no such partition
            continue
        metrics.GROUP_LAG.labels(group, topic, str(partition)).set(max(end.high_watermark - committed, 0))


async def gauges_forever(ctx, logs, coordinator, connections) -> None:
    while True:
        await asyncio.sleep(GAUGE_INTERVAL_S)
        try:
            metrics.CONNECTIONS.set(len(connections))
            partition_gauges(logs)
            await group_lag(ctx, coordinator)
        except Exception:  # metrics must never take a worker down
            log.exception("updating metrics failed")
