"""Spark reads of a segment directory: rows/s, 100-byte records, in one run.

    .venv/bin/python -m pytest bench/test_bench_spark.py --benchmark-only -s

Three sources read the same number of rows through the same Spark job
(``df.write.format("noop")`` on local[2], two input partitions):

* ``hpbroker``  the real source over 2 x ROWS/2 records, uncompressed and lz4
  (1000-record batches, null keys, 100-byte values, no headers);
* ``ceiling``   a source whose read() yields Arrow batches of the same schema
  and shape, built once per Python worker and then reused: no file, no parsing
  (the most any source can get through Spark's Python Data Source path);
* ``python``    a source that decodes the same files with the record codec
  batch by batch and yields one tuple per record (Spark converts the tuples).

``extra_info`` carries rows/s; the ratio test measures hpbroker and the ceiling
in interleaved pairs, so both see the same machine noise, and reports the median.
"""

import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import cast

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from hpbroker.kernels import layout  # noqa: E402
from hpbroker.records import Record, decode_batch, encode_batch, set_base_offset  # noqa: E402
from hpbroker.spark.schema import ARROW_HEADERS_TYPE, ARROW_SCHEMA, ARROW_TIMESTAMP_TYPE, SPARK_SCHEMA  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROWS = int(os.environ.get("BENCH_SPARK_ROWS", 2_000_000))
PYTHON_ROWS = ROWS // 20  # the pure-Python source is slow; rows/s is what is compared
BATCH_RECORDS = 1000
VALUE_BYTES = 100
CEILING_BATCH_ROWS = 80_000  # about what one 8 MiB chunk of the real source gives
T0 = 1_700_000_000_000


def _write_partition(path: str, rows: int, codec: int) -> None:
    os.makedirs(path)
    value = os.urandom(VALUE_BYTES)
    records = [Record(i, T0 + i, None, value) for i in range(BATCH_RECORDS)]
    batch = bytearray(encode_batch(records, compression=codec))
    with open(os.path.join(path, "00000000000000000000.log"), "wb") as f:
        for base in range(0, rows, BATCH_RECORDS):
            set_base_offset(batch, 0, base)  # outside the CRC
            f.write(batch)


# --- the comparison sources (module level: the Python workers import them) -----

class _Part(InputPartition):
    def __init__(self, path, partition, rows):
        self.path, self.partition, self.rows = path, partition, rows


_CEILING_CACHE = {}


def _ceiling_batch(rows: int) -> pa.RecordBatch:
    if rows not in _CEILING_CACHE:
        values = np.frombuffer(os.urandom(VALUE_BYTES), np.uint8)
        data = np.tile(values, rows)
        offsets = (np.arange(rows + 1, dtype=np.int64) * VALUE_BYTES).astype(np.int32)
        topic = b"bench"
        columns = [
            pa.nulls(rows, pa.binary()),
            pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
            pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer((np.arange(rows + 1) * 5).astype(np.int32)),
                                                      pa.py_buffer(topic * rows)]),
            pa.array(np.zeros(rows, np.int32)), pa.array(np.arange(rows, dtype=np.int64)),
            pa.array((T0 + np.arange(rows, dtype=np.int64)) * 1000).cast(ARROW_TIMESTAMP_TYPE),
            pa.array(np.zeros(rows, np.int32)), pa.nulls(rows, ARROW_HEADERS_TYPE),
        ]
        _CEILING_CACHE[rows] = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    return _CEILING_CACHE[rows]


class _CeilingReader(DataSourceReader):
    def __init__(self, options):
        self.rows = int(options["rows"])

    def partitions(self):
        return [_Part(None, p, self.rows // 2) for p in range(2)]

    def read(self, partition):
        left = cast(_Part, partition).rows  # the partitions are the _Parts this reader planned
        while left > 0:
            n = min(left, CEILING_BATCH_ROWS)
            yield _ceiling_batch(CEILING_BATCH_ROWS).slice(0, n)
            left -= n


class CeilingSource(DataSource):
    @classmethod
    def name(cls):
        return "bench_ceiling"

    def schema(self):
        return SPARK_SCHEMA

    def reader(self, schema):
        return _CeilingReader(self.options)


class _PythonReader(DataSourceReader):
    def __init__(self, options):
        self.dirs = [options["path"] + f"/{options['topic']}-{p}" for p in range(2)]

    def partitions(self):
        return [_Part(d, p, 0) for p, d in enumerate(self.dirs)]

    def read(self, partition):
        import datetime
        part = cast(_Part, partition)  # the partitions are the _Parts this reader planned
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        data = open(os.path.join(part.path, "00000000000000000000.log"), "rb").read()
        pos = 0
        while pos < len(data):
            batch = decode_batch(data, pos)
            pos += batch.header.size
            if batch.header.is_control:
                continue
            ts_type = batch.header.timestamp_type
            for r in batch.records:
                yield (r.key, r.value, "bench", part.partition, r.offset,
                       epoch + datetime.timedelta(milliseconds=r.timestamp), ts_type, None)


class PythonSource(DataSource):
    @classmethod
    def name(cls):
        return "bench_python"

    def schema(self):
        return SPARK_SCHEMA

    def reader(self, schema):
        return _PythonReader(self.options)


# --- fixtures -------------------------------------------------------------------

@pytest.fixture(scope="module")
def data_dir():
    path = tempfile.mkdtemp(prefix="hpbroker-bench-spark-", dir=os.environ.get("BENCH_DIR"))
    for topic, codec, rows in (("none", layout.CODEC_NONE, ROWS), ("lz4", layout.CODEC_LZ4, ROWS),
                               ("pynone", layout.CODEC_NONE, PYTHON_ROWS)):
        for p in range(2):
            _write_partition(os.path.join(path, f"{topic}-{p}"), rows // 2, codec)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def spark():
    paths = [str(ROOT), str(ROOT / "bench")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                      PYTHONPATH=os.pathsep.join(paths))
    from pyspark.sql import SparkSession

    from hpbroker.spark import register
    session = (SparkSession.builder.master("local[2]").appName("hpbroker-bench")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    session.dataSource.register(CeilingSource)
    session.dataSource.register(PythonSource)
    yield session
    session.stop()


def _job(spark, data_dir, source: str, topic: str = "", rows: int = ROWS):
    def run() -> float:
        reader = spark.read.format(source)
        if source == "hpbroker":
            reader = reader.option("subscribe", topic)
        elif source == "bench_python":
            reader = reader.option("topic", topic)
        else:
            reader = reader.option("rows", str(rows))
        start = time.perf_counter()
        reader.load(data_dir).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start
    run()  # warm up: Python workers started, numba caches loaded, ceiling batches built
    run()
    return run


def _report(benchmark, rows):
    rate = rows / benchmark.stats.stats.median
    benchmark.extra_info["rows/s"] = round(rate)
    print(f"\n{benchmark.name}: {rate / 1e6:.2f} million rows/s")


def test_hpbroker_uncompressed(benchmark, spark, data_dir):
    benchmark.pedantic(_job(spark, data_dir, "hpbroker", "none"), rounds=5, iterations=1)
    _report(benchmark, ROWS)


def test_hpbroker_lz4(benchmark, spark, data_dir):
    benchmark.pedantic(_job(spark, data_dir, "hpbroker", "lz4"), rounds=5, iterations=1)
    _report(benchmark, ROWS)


def test_ceiling_prebuilt_arrow(benchmark, spark, data_dir):
    benchmark.pedantic(_job(spark, data_dir, "bench_ceiling"), rounds=5, iterations=1)
    _report(benchmark, ROWS)


def test_pure_python_decoder(benchmark, spark, data_dir):
    benchmark.pedantic(_job(spark, data_dir, "bench_python", "pynone", PYTHON_ROWS), rounds=3, iterations=1)
    _report(benchmark, PYTHON_ROWS)


@pytest.mark.parametrize("topic", ["none", "lz4"])
def test_ratio_hpbroker_over_ceiling(benchmark, spark, data_dir, topic):
    real, ceiling = _job(spark, data_dir, "hpbroker", topic), _job(spark, data_dir, "bench_ceiling")
    ratios = []

    def pair():
        ratios.append(ceiling() / real())

    benchmark.pedantic(pair, rounds=7, iterations=1)
    ratios.sort()
    benchmark.extra_info["hpbroker/ceiling rows/s (median)"] = round(ratios[len(ratios) // 2], 3)
    benchmark.extra_info["all ratios"] = [round(r, 3) for r in ratios]
    print(f"\nhpbroker({topic})/ceiling: median {ratios[len(ratios) // 2]:.3f}, all {[round(r, 3) for r in ratios]}")
