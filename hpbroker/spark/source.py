"""The ``hpbroker`` Python Data Source: batch and streaming reads of segment directories.

    spark.dataSource.register(HpbrokerDataSource)
    spark.read.format("hpbroker").option("subscribe", "events").load("/var/lib/hpbroker/data")

Options: see ``options.py``.  Planning (``partitions``, ``latestOffset``) runs
in Spark's planner Python process and fixes every range before any executor
reads, so all tasks of one query see the same prefix of each partition.

Streaming offsets are JSON ``{"topic": {"partition": next offset}}``, built in
sorted order: Spark tells "no new data" by comparing the JSON text of the
start and end offsets.  A partition that appears later is read from its
earliest offset, as Spark's Kafka source does.
"""

from typing import cast

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from hpbroker.spark import plan, ratelimit
from hpbroker.spark.options import Options
from hpbroker.spark.plan import Slice
from hpbroker.spark.read import read_slice
from hpbroker.spark.schema import SPARK_SCHEMA


class HpbrokerDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "hpbroker"

    def schema(self):
        return SPARK_SCHEMA

    def reader(self, schema) -> "BatchReader":
        return BatchReader(Options.parse(self.options, streaming=False))

    def streamReader(self, schema) -> "StreamReader":
        return StreamReader(Options.parse(self.options, streaming=True))


def start_offsets(opts: Options, infos: dict) -> dict:
    """Starting offset per partition for startingOffsets / startingTimestamp."""
    if opts.starting_timestamp is not None:
        return {k: plan.offset_for_timestamp(i, opts.starting_timestamp) for k, i in infos.items()}
    return {k: plan.resolve(opts.starting, i, "earliest") for k, i in infos.items()}


class BatchReader(DataSourceReader):
    def __init__(self, opts: Options):
        self.opts = opts

    def partitions(self):
        infos = plan.describe(self.opts)
        starts = start_offsets(self.opts, infos)
        out = []
        for key, info in infos.items():
            end = plan.resolve(self.opts.ending, info, "latest")
            if end > info.latest:
                if self.opts.fail_on_data_loss:
                    raise ValueError(f"{key[0]}-{key[1]}: endingOffsets asks for offsets up to {end} but only "
                                     f"{info.latest} are readable (truncated?); "
                                     "failOnDataLoss=false reads what is there")
                end = info.latest
            out += plan.slices(info, starts[key], end, self.opts)
        return out

    def read(self, partition):
        return read_slice(cast(Slice, partition))  # the partitions are the Slices this reader planned


def to_json(offsets: dict) -> dict:
    out = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(offsets: dict) -> dict:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: Options):
        self.opts = opts
        self._target = None  # Trigger.AvailableNow: the latest offsets when the query started

    def initialOffset(self) -> dict:
        return to_json(start_offsets(self.opts, plan.describe(self.opts)))

    def _latest(self, infos) -> dict:
        latest = {k: i.latest for k, i in infos.items()}
        if self._target is not None:
            latest = {k: min(v, self._target.get(k, v)) for k, v in latest.items()}
        return latest

    def latestOffset(self, start: dict, limit) -> dict:
        infos = plan.describe(self.opts)
        begin = from_json(start)
        begin = {k: begin.get(k, i.earliest) for k, i in infos.items()} | begin
        latest = {k: max(v, begin.get(k, v)) for k, v in self._latest(infos).items()}
        if isinstance(limit, ReadMaxRows):
            latest = ratelimit.by_records(begin, latest, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            latest = ratelimit.by_bytes(infos, begin, latest, limit.max_bytes)
        if not isinstance(limit, (ReadAllAvailable, ReadMaxBytes)) and self.opts.max_bytes_per_trigger:
            latest = ratelimit.by_bytes(infos, begin, latest, self.opts.max_bytes_per_trigger)
        return to_json({**begin, **latest})

    def reportLatestOffset(self):
        return to_json(self._latest(plan.describe(self.opts)))

    def getDefaultReadLimit(self):
        if self.opts.max_records_per_trigger:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        if self.opts.max_bytes_per_trigger:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {k: i.latest for k, i in plan.describe(self.opts).items()}

    def partitions(self, start: dict, end: dict):
        infos = plan.describe(self.opts, with_latest=False)
        begin, finish = from_json(start), from_json(end)
        out = []
        for key, stop in sorted(finish.items()):
            info = infos.get(key)
            if info is not None:
                out += plan.slices(info, begin.get(key, info.earliest), stop, self.opts)
        return out

    def read(self, partition):
        return read_slice(cast(Slice, partition))  # the partitions are the Slices this reader planned

    def commit(self, end: dict) -> None:
        pass  # nothing to release: the source keeps no state per batch
