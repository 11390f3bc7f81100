"""The broker's Prometheus metrics, aggregated across the acceptor and workers.

prometheus-client's multiprocess mode: every process writes its samples to
memory-mapped files in one directory (``metrics_dir``, named before this
module is first imported), and the acceptor's ``/metrics`` reads them all.
Gauges of a process that died are dropped (``mark_dead``), counters kept.
"""

import glob
import math
import os
from collections.abc import Sequence

from prometheus_client import Counter, Gauge, multiprocess, values
from prometheus_client.utils import floatToGoString

from hpbroker.server.metrics_dir import ENV

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SummedHistogram:
    """A histogram whose caller counts the observations itself and hands them
    over in one go: ``add(label values, seconds summed, count per bucket)``,
    the buckets being ``bounds`` (the last +Inf). prometheus-client's
    ``Histogram`` takes one observation at a time, each through a lock into
    its multiprocess file, twice (7 µs a request, timed); this writes the
    same series a ``Histogram`` of that name writes (``_sum`` and each
    ``_bucket``, whose ``_count`` and cumulation the scrape adds), with
    prometheus-client's own value class."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]):
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets) + (math.inf,)
        self._values: dict[tuple[str, ...], tuple] = {}

    def add(self, labelvalues: tuple[str, ...], seconds: float, counts: Sequence[int]) -> None:
        found = self._values.get(labelvalues)
        if found is None:
            found = self._values[labelvalues] = self._make(labelvalues)
        total, buckets = found
        total.inc(seconds)
        for value, count in zip(buckets, counts):
            if count:
                value.inc(count)

    def _make(self, labelvalues: tuple[str, ...]) -> tuple:
        total = values.ValueClass("histogram", self.name, self.name + "_sum", self.labelnames, labelvalues,
                                  self.documentation)
        buckets = [values.ValueClass("histogram", self.name, self.name + "_bucket", self.labelnames + ("le",),
                                     labelvalues + (floatToGoString(bound),), self.documentation)
                   for bound in self.bounds]
        return total, buckets


REQUESTS = Counter("hpbroker_requests", "Requests handled", ["api"])
REQUEST_SECONDS = SummedHistogram("hpbroker_request_seconds",
                                  "Time from a request's decoding to its answer (long polls included)",
                                  ["api"], _LATENCY_BUCKETS)
BYTES_IN = Counter("hpbroker_topic_bytes_in", "Record batch bytes appended", ["topic"])
RECORDS_IN = Counter("hpbroker_topic_records_in", "Records appended", ["topic"])
BYTES_OUT = Counter("hpbroker_topic_bytes_out", "Record batch bytes sent to fetchers", ["topic"])
PEER_PAYLOAD_BYTES = Counter("hpbroker_peer_payload_bytes",
                             "Record bytes sent to the worker owning their partition, by path: by reference to "
                             "where a large request was received (received), copied into a slot of the "
                             "shared-memory arena (arena), or inline in the peer channel (no free slot)", ["path"])
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
FSYNC_SECONDS = SummedHistogram("hpbroker_fsync_seconds", "fsync of a segment", (), _LATENCY_BUCKETS)
WORKER_RESTARTS = Counter("hpbroker_worker_restarts", "Workers restarted after dying")
CONNECTIONS_MOVED = Counter("hpbroker_connections_moved",
                            "Client connections handed to the worker owning the partitions they ask for")
PARTITIONS_MOVED = Counter("hpbroker_partitions_moved",
                           "Standalone partitions handed to the worker whose connections alone write them")


def mark_dead(pid: int) -> None:
    if os.environ.get(ENV):
        multiprocess.mark_process_dead(pid)


class _SettledFilesCollector(multiprocess.MultiProcessCollector):
    """prometheus-client's collector, but for the files a process has only
    just created: empty until that process sizes and maps them, they failed
    the whole scrape (a worker's first sample of a kind races every scrape),
    and the exception took the acceptor down."""

    def collect(self):
        files = []
        for path in glob.glob(os.path.join(self._path, "*.db")):
            try:
                if os.path.getsize(path) >= 8:  # its used-bytes header is there
                    files.append(path)
            except FileNotFoundError:  # a dead process's, removed meanwhile
                pass
        return self.merge(files, accumulate=True)


def render() -> bytes:
    """The exposition text of every process's samples."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    if os.environ.get(ENV):
        _SettledFilesCollector(registry)
    else:
        from prometheus_client import REGISTRY as registry
    return generate_latest(registry)
