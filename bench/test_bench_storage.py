"""Log append and read against the raw file system, measured in the same run.

    .venv/bin/python -m pytest bench/test_bench_storage.py --benchmark-only

Each round writes (or reads) ``TOTAL`` bytes; ``extra_info`` carries GB/s, and
the ``ratio`` tests print log/raw for the pair measured one after the other.
"""

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import NamedTuple

import pytest

from hpbroker.records import Record, encode_batch
from hpbroker.storage import Log, LogConfig, space

BATCH_RECORDS = 1024
RECORD_BYTES = 1000
TOTAL_BATCHES = 256  # 256 x ~1 MiB per round


@pytest.fixture(scope="module")
def one_mib_batch() -> bytearray:
    """A bytearray, as a request arrives from a socket: the log stamps it in place."""
    value = os.urandom(RECORD_BYTES)
    records = [Record(offset=i, timestamp=1_700_000_000_000 + i, key=None, value=value) for i in range(BATCH_RECORDS)]
    return bytearray(encode_batch(records))


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="hpbroker-bench-", dir=os.environ.get("BENCH_DIR"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _open_log(workdir) -> Log:
    return Log.open(os.path.join(workdir, f"bench-{time.monotonic_ns()}"), "bench", 0, LogConfig())


def _append_to_log(log, batch) -> None:
    for _ in range(TOTAL_BATCHES):
        log.append(batch)


def _remove_log(log, _batch=None) -> None:
    log.close()  # fsyncs what was appended: not part of an append's cost
    shutil.rmtree(log.directory)


def _open_raw(workdir) -> int:
    """A new file, its name removed at once: the descriptor writes on, the close frees it."""
    path = os.path.join(workdir, f"raw-{time.monotonic_ns()}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.unlink(path)
    return fd


def _write_raw(fd, batch) -> None:
    for _ in range(TOTAL_BATCHES):
        os.write(fd, batch)


def _remove_raw(fd, _batch=None) -> None:
    os.close(fd)


class _Side(NamedTuple):
    """One side of a comparison: what a round opens, the writes it times, what it removes."""

    open: Callable
    write: Callable
    remove: Callable


LOG = _Side(_open_log, _append_to_log, _remove_log)
RAW = _Side(_open_raw, _write_raw, _remove_raw)


def _timed(side: _Side, workdir, batch) -> float:
    """One round of ``side``: seconds of its writes alone."""
    target = side.open(workdir)
    start = time.perf_counter()
    side.write(target, batch)
    elapsed = time.perf_counter() - start
    side.remove(target)
    return elapsed


def _bench(benchmark, side: _Side, workdir, batch) -> None:
    """pytest-benchmark rounds of ``side``, only its writes timed, and their median GB/s."""
    benchmark.pedantic(side.write, setup=lambda: ((side.open(workdir), batch), {}), teardown=side.remove,
                       rounds=5, iterations=1)
    benchmark.extra_info["GB/s"] = round(_gbps(batch, benchmark.stats.stats.median), 3)


def _gbps(batch, seconds) -> float:
    return len(batch) * TOTAL_BATCHES / seconds / 1e9


def test_log_append_1mib_batches(benchmark, workdir, one_mib_batch):
    """Only the appends are timed: opening, closing (its fsync) and removing the log are not."""
    _bench(benchmark, LOG, workdir, one_mib_batch)


def test_raw_os_write_1mib(benchmark, workdir, one_mib_batch):
    _bench(benchmark, RAW, workdir, one_mib_batch)


def test_append_ratio_log_over_raw(benchmark, workdir, one_mib_batch):
    """Interleaved pairs, so both sides see the same machine noise; the median
    of the throughput ratios log / raw goes into extra_info."""
    ratios = []

    def pair():
        raw = _timed(RAW, workdir, one_mib_batch)
        ratios.append(raw / _timed(LOG, workdir, one_mib_batch))

    benchmark.pedantic(pair, rounds=7, iterations=1)
    ratios.sort()
    benchmark.extra_info["log/raw throughput (median)"] = round(ratios[len(ratios) // 2], 3)
    benchmark.extra_info["all ratios"] = [round(r, 3) for r in ratios]


def test_append_ratio_reserved_over_unreserved(benchmark, workdir, one_mib_batch, monkeypatch):
    """The log's appends with space reserved ahead (``storage/space.py``) and
    without (as on a file system with no fallocate), in interleaved pairs; the
    median of the throughput ratios reserved / unreserved goes into extra_info."""
    ratios = []
    fallocate = space._fallocate

    def pair():
        monkeypatch.setattr(space, "_fallocate", None)
        unreserved = _timed(LOG, workdir, one_mib_batch)
        monkeypatch.setattr(space, "_fallocate", fallocate)
        ratios.append(unreserved / _timed(LOG, workdir, one_mib_batch))

    benchmark.pedantic(pair, rounds=7, iterations=1)
    ratios.sort()
    benchmark.extra_info["reserved/unreserved throughput (median)"] = round(ratios[len(ratios) // 2], 3)
    benchmark.extra_info["all ratios"] = [round(r, 3) for r in ratios]


@pytest.fixture(scope="module")
def filled_log(one_mib_batch):
    directory = tempfile.mkdtemp(prefix="hpbroker-bench-read-", dir=os.environ.get("BENCH_DIR"))
    log = Log.open(os.path.join(directory, "bench-0"), "bench", 0, LogConfig(segment_bytes=64 << 20))
    for _ in range(TOTAL_BATCHES):
        log.append(one_mib_batch)
    log.flush()
    yield log
    log.close()
    shutil.rmtree(directory, ignore_errors=True)


def _read_log(log) -> int:
    offset, total = 0, 0
    while offset < log.written_offset:
        found = log.read(offset, 1 << 20)
        total += len(found.tobytes())
        offset = found.first_offset + BATCH_RECORDS
    return total


def _read_raw(log) -> int:
    total = 0
    for segment in log.segments:
        with open(segment.log_path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total


def test_log_read_whole_log(benchmark, filled_log):
    total = benchmark.pedantic(lambda: _read_log(filled_log), rounds=5, iterations=1)
    benchmark.extra_info["GB/s"] = round(total / benchmark.stats.stats.median / 1e9, 3)


def test_raw_sequential_read(benchmark, filled_log):
    total = benchmark.pedantic(lambda: _read_raw(filled_log), rounds=5, iterations=1)
    benchmark.extra_info["GB/s"] = round(total / benchmark.stats.stats.median / 1e9, 3)


BEHIND_BATCHES = 48  # how far a follower trailed the leader under unpaced acks=all (bench/cluster_e2e.py)


def test_log_read_behind_the_tail_while_appending(benchmark, workdir, one_mib_batch):
    """A follower 48 batches behind reading 1 MiB, a batch appended before each
    read (not timed), as under an unpaced acks=all producer: each read starts
    where the last one ended, older than the recent batches, while the segment
    keeps growing."""
    log = Log.open(os.path.join(workdir, "behind-0"), "behind", 0, LogConfig())
    for _ in range(BEHIND_BATCHES):
        log.append(bytearray(one_mib_batch))
    reader = {"offset": 0}

    def append():
        log.append(bytearray(one_mib_batch))

    def read():
        found = log.read(reader["offset"], 1 << 20)
        assert found is not None
        reader["offset"] = found.first_offset + BATCH_RECORDS

    benchmark.pedantic(read, setup=append, rounds=200, iterations=1)
    log.close()
