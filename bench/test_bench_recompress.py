"""Recompressing a producer's lz4 batch into zstd (``compression.type=zstd``)
against the floor: the same lz4 decompress and zstd compress, called on the
libraries directly, in the same run.

    .venv/bin/python -m pytest bench/test_bench_recompress.py --benchmark-only

The batch holds 1 MiB (uncompressed) of JSON-like events with keys and a
header, compressed as Kafka's producers do (independent 64 KiB lz4 blocks);
MB/s counts those uncompressed bytes.  The recompression path adds the CRC
check of the input, the record walk and the new header and CRC; the ratio
(floor time / recompress time, median of interleaved pairs) says what share
of the libraries' speed is kept.  Also timed: a whole ``Log.append`` of the
batch into a zstd topic, against a ``producer`` topic (no decode at all).
"""

import os
import random
import shutil
import tempfile
import time

import lz4.frame
import pytest
import zstandard

from hpbroker.kernels import layout
from hpbroker.records import Header, Record, encode_batch
from hpbroker.records.recompress import recompress
from hpbroker.storage import Log, LogConfig

TARGET_BYTES = 1 << 20
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default


def _events():
    """~250-byte JSON events, as a clickstream producer sends them."""
    rng = random.Random(7)
    pages = ["/", "/search", "/cart", "/checkout"] + [f"/products/{rng.randrange(10**6):06d}" for _ in range(200)]
    kinds = ["page_view", "click", "add_to_cart", "purchase", "scroll"]
    records, size, i = [], 0, 0
    while size < TARGET_BYTES:
        user = rng.randrange(50_000)
        value = (f'{{"event":"{rng.choice(kinds)}","user_id":{user},"session":"{rng.getrandbits(64):016x}",'
                 f'"page":"{rng.choice(pages)}","referrer":"{rng.choice(pages)}","ts":{1_700_000_000_000 + i * 3},'
                 f'"price_cents":{rng.randrange(100, 100_000)},"ua":"Mozilla/5.0 (X11; Linux x86_64)",'
                 f'"country":"{rng.choice(["DE", "FR", "US", "JP", "BR"])}"}}').encode()
        key = b"user-%d" % user
        record = Record(offset=i, timestamp=1_700_000_000_000 + i * 3, key=key, value=value,
                        headers=(Header(b"trace-id", b"%032x" % rng.getrandbits(128)),))
        records.append(record)
        size += len(value) + len(key) + 45
        i += 1
    return records


@pytest.fixture(scope="module")
def lz4_batch() -> bytes:
    return encode_batch(_events(), compression=layout.CODEC_LZ4)


@pytest.fixture(scope="module")
def records_part(lz4_batch) -> tuple[bytes, int]:
    """The compressed records part and its uncompressed size."""
    compressed = lz4_batch[layout.RECORDS:]
    return compressed, len(lz4.frame.decompress(compressed))


def _recompress(batch):
    return recompress(batch, layout.CODEC_ZSTD, ZSTD_LEVEL)


def _floor(compressed, compressor):
    return compressor.compress(lz4.frame.decompress(compressed))


def _mbps(nbytes, seconds) -> float:
    return round(nbytes / seconds / 1e6, 1)


def test_recompress_lz4_to_zstd(benchmark, lz4_batch, records_part):
    _recompress(lz4_batch)  # numba's record walk compiles (or loads its cache) once
    benchmark.pedantic(_recompress, args=(lz4_batch,), rounds=30, iterations=1, warmup_rounds=2)
    benchmark.extra_info["MB/s (uncompressed)"] = _mbps(records_part[1], benchmark.stats.stats.median)
    benchmark.extra_info["bytes in / out"] = [len(lz4_batch), len(_recompress(lz4_batch))]


def test_floor_lz4_decompress_zstd_compress(benchmark, records_part):
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    benchmark.pedantic(_floor, args=(records_part[0], compressor), rounds=30, iterations=1, warmup_rounds=2)
    benchmark.extra_info["MB/s (uncompressed)"] = _mbps(records_part[1], benchmark.stats.stats.median)


def test_ratio_recompress_over_floor(benchmark, lz4_batch, records_part):
    """Interleaved pairs, so both sides see the same machine noise."""
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    _recompress(lz4_batch)
    ratios = []

    def pair():
        t0 = time.perf_counter()
        _floor(records_part[0], compressor)
        t1 = time.perf_counter()
        _recompress(lz4_batch)
        t2 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))

    benchmark.pedantic(pair, rounds=31, iterations=1, warmup_rounds=1)
    ratios.sort()
    benchmark.extra_info["recompress/floor throughput (median)"] = round(ratios[len(ratios) // 2], 3)
    benchmark.extra_info["quartiles"] = [round(ratios[len(ratios) // 4], 3), round(ratios[3 * len(ratios) // 4], 3)]


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="hpbroker-bench-", dir=os.environ.get("BENCH_DIR"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


APPENDS = 32


def _append(workdir, batch, compression_type) -> float:
    directory = os.path.join(workdir, f"{compression_type}-{time.monotonic_ns()}")
    log = Log.open(directory, "bench", 0, LogConfig(compression_type=compression_type))
    start = time.perf_counter()
    for _ in range(APPENDS):
        log.append(bytearray(batch))
    elapsed = time.perf_counter() - start
    log.close()
    shutil.rmtree(directory)
    return elapsed


@pytest.mark.parametrize("compression_type", ["producer", "zstd"])
def test_log_append_of_the_lz4_batch(benchmark, workdir, lz4_batch, records_part, compression_type):
    """Only the appends are timed (not opening and closing the log)."""
    _append(workdir, lz4_batch, compression_type)
    times = []
    benchmark.pedantic(lambda: times.append(_append(workdir, lz4_batch, compression_type)), rounds=5, iterations=1)
    times.sort()
    benchmark.extra_info["MB/s (uncompressed)"] = _mbps(records_part[1] * APPENDS, times[len(times) // 2])
