"""The broker's Prometheus metrics, aggregated across the acceptor and workers.

prometheus-client's multiprocess mode: every process writes its samples to
memory-mapped files in one directory (``metrics_dir``, named before this
module is first imported), and the acceptor's ``/metrics`` reads them all.
Gauges of a process that died are dropped (``mark_dead``), counters kept.
"""

import os

from prometheus_client import Counter, Gauge, Histogram

from hpbroker.server.metrics_dir import ENV

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Counter("hpbroker_requests", "Requests handled", ["api"])
REQUEST_SECONDS = Histogram("hpbroker_request_seconds",
                            "Time from a request's decoding to its answer (long polls included)",
                            ["api"], buckets=_LATENCY_BUCKETS)
BYTES_IN = Counter("hpbroker_topic_bytes_in", "Record batch bytes appended", ["topic"])
RECORDS_IN = Counter("hpbroker_topic_records_in", "Records appended", ["topic"])
BYTES_OUT = Counter("hpbroker_topic_bytes_out", "Record batch bytes sent to fetchers", ["topic"])
PEER_PAYLOAD_BYTES = Counter("hpbroker_peer_payload_bytes",
                             "Record bytes sent to the worker owning their partition, by path: the shared-memory "
                             "arena, or inline in the peer channel (no free slot)", ["path"])
CONNECTIONS = Gauge("hpbroker_connections", "Open client connections", multiprocess_mode="livesum")
LOG_END_OFFSET = Gauge("hpbroker_log_end_offset", "A partition's log end offset",
                       ["topic", "partition"], multiprocess_mode="livemax")
LOG_FLUSHED_OFFSET = Gauge("hpbroker_log_flushed_offset", "A partition's flushed (fsynced) offset",
                           ["topic", "partition"], multiprocess_mode="livemax")
LOG_START_OFFSET = Gauge("hpbroker_log_start_offset", "A partition's log start offset",
                         ["topic", "partition"], multiprocess_mode="livemax")
LOG_SEGMENTS = Gauge("hpbroker_log_segments", "Segments of a partition", ["topic", "partition"],
                     multiprocess_mode="livemax")
LOG_SIZE = Gauge("hpbroker_log_size_bytes", "Bytes in a partition's segments", ["topic", "partition"],
                 multiprocess_mode="livemax")
GROUP_LAG = Gauge("hpbroker_consumer_group_lag", "Log end offset minus the group's committed offset",
                  ["group", "topic", "partition"], multiprocess_mode="livemax")
FSYNC_SECONDS = Histogram("hpbroker_fsync_seconds", "fsync of a segment", buckets=_LATENCY_BUCKETS)
WORKER_RESTARTS = Counter("hpbroker_worker_restarts", "Workers restarted after dying")
CONNECTIONS_MOVED = Counter("hpbroker_connections_moved",
                            "Client connections handed to the worker owning the partitions they ask for")


def observe_fsync(seconds: float) -> None:
    FSYNC_SECONDS.observe(seconds)


def mark_dead(pid: int) -> None:
    from prometheus_client import multiprocess

    if os.environ.get(ENV):
        multiprocess.mark_process_dead(pid)


def render() -> bytes:
    """The exposition text of every process's samples."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    if os.environ.get(ENV):
        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY as registry
    return generate_latest(registry)
