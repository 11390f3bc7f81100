"""Kernels against their references, measured in the same run.

    .venv/bin/python -m pytest bench/test_bench_kernels.py --benchmark-only

* CRC-32C of 1 MiB: our kernel vs the crc32c C library.
* Batch scan with CRC validation over a 1 GiB mmap'd segment of 16 KiB and of
  1 KiB batches, vs a Python loop calling crc32c per batch.
* Record decode of 100-byte records into columns (records/s).

``extra_info`` carries GB/s or records/s; the ``ratio`` entries are medians of
interleaved pairs, so both sides see the same machine noise.
"""

import mmap
import os
import struct
import tempfile
import time

import crc32c as crc32c_library
import numpy as np
import pytest

from hpbroker.kernels import crc, decode_records, layout, scan_batches
from hpbroker.records import Record, encode_batch

SEGMENT_BYTES = 1 << 30
MIB = np.frombuffer(os.urandom(1 << 20), np.uint8)


def _median_ratio(ours, reference, rounds=9):
    ratios = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        reference()
        t1 = time.perf_counter()
        ours()
        t2 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))
    return round(sorted(ratios)[rounds // 2], 3)


def test_crc32c_kernel_1mib(benchmark):
    crc.crc32c_update(MIB, 0, MIB.size, 0)
    benchmark(crc.crc32c_update, MIB, 0, MIB.size, 0)
    benchmark.extra_info["GB/s"] = round(MIB.size / benchmark.stats.stats.median / 1e9, 2)
    benchmark.extra_info["hardware"] = crc.HARDWARE
    data = MIB.tobytes()
    loops = 50
    benchmark.extra_info["kernel/library throughput (median)"] = _median_ratio(
        lambda: [crc.crc32c_update(MIB, 0, MIB.size, 0) for _ in range(loops)],
        lambda: [crc32c_library.crc32c(data) for _ in range(loops)],
    )


def test_crc32c_library_1mib(benchmark):
    data = MIB.tobytes()
    benchmark(crc32c_library.crc32c, data)
    benchmark.extra_info["GB/s"] = round(MIB.size / benchmark.stats.stats.median / 1e9, 2)


def _segment(batch_bytes: int):
    """A 1 GiB file of identical ``batch_bytes`` batches, mapped read-only (page cache warm)."""
    value_size = batch_bytes - layout.BATCH_HEADER_SIZE - 12
    batch = encode_batch([Record(0, 1_700_000_000_000, None, os.urandom(value_size))])
    count = SEGMENT_BYTES // len(batch)
    fd, path = tempfile.mkstemp(prefix="hpbroker-bench-scan-", dir=os.environ.get("BENCH_DIR"))
    block = batch * max(1, (16 << 20) // len(batch))
    written = 0
    while written + len(block) <= count * len(batch):
        written += os.write(fd, block)
    while written < count * len(batch):
        written += os.write(fd, batch)
    view = np.frombuffer(mmap.mmap(fd, written, access=mmap.ACCESS_READ), np.uint8)
    os.close(fd)
    os.unlink(path)
    return view, len(batch), count


@pytest.fixture(scope="module", params=[16 << 10, 1 << 10], ids=["16KiB", "1KiB"])
def segment(request):
    return _segment(request.param)


def _python_loop(view, batch_size, count):
    """What a reader without kernels does: parse each header, crc32c each batch."""
    data = memoryview(view)
    pos, ok = 0, 0
    for _ in range(count):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        stored = struct.unpack_from(">I", data, pos + 17)[0]
        ok += crc32c_library.crc32c(data[pos + 21 : pos + 12 + length]) == stored
        pos += 12 + length
    return ok


def test_scan_with_crc_1gib(benchmark, segment):
    view, batch_size, count = segment
    scan = benchmark.pedantic(lambda: scan_batches(view), rounds=3, iterations=1, warmup_rounds=1)
    assert len(scan.position) == count and scan.crc_ok.all()
    benchmark.extra_info["GB/s"] = round(view.size / benchmark.stats.stats.median / 1e9, 2)
    benchmark.extra_info["batches"] = count


def test_python_crc_loop_1gib(benchmark, segment):
    view, batch_size, count = segment
    ok = benchmark.pedantic(lambda: _python_loop(view, batch_size, count), rounds=1, iterations=1)
    assert ok == count
    benchmark.extra_info["GB/s"] = round(view.size / benchmark.stats.stats.median / 1e9, 2)


def test_scan_ratio_over_python_loop(benchmark, segment):
    view, batch_size, count = segment
    ratio = benchmark.pedantic(
        lambda: _median_ratio(lambda: scan_batches(view), lambda: _python_loop(view, batch_size, count), rounds=3),
        rounds=1, iterations=1)
    benchmark.extra_info["scan/python-loop throughput (median)"] = ratio


@pytest.fixture(scope="module")
def hundred_byte_records():
    """64 MiB of uncompressed batches of 1000 records with 100-byte values."""
    value = os.urandom(100)
    batch = encode_batch([Record(i, 1_700_000_000_000 + i, b"key-%04d" % i, value) for i in range(1000)])
    repeats = (64 << 20) // len(batch)
    view = np.frombuffer(batch * repeats, np.uint8)
    scan = scan_batches(view)
    return view, scan


def test_record_decode_100b(benchmark, hundred_byte_records):
    view, scan = hundred_byte_records
    args = (view, scan.position + layout.BATCH_HEADER_SIZE, scan.position + scan.size, scan.base_offset,
            scan.base_timestamp, scan.record_count)
    decoded = benchmark.pedantic(lambda: decode_records(*args), rounds=5, iterations=1, warmup_rounds=1)
    records = int(scan.record_count.sum())
    assert decoded.error_batch == -1 and len(decoded.offset) == records
    benchmark.extra_info["records/s"] = round(records / benchmark.stats.stats.median)
    benchmark.extra_info["GB/s"] = round(view.size / benchmark.stats.stats.median / 1e9, 2)
