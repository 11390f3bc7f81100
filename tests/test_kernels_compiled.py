"""No kernel compiles at run time: every jitted entry point is compiled (or
loaded) for its declared signatures on import, refuses to compile more, and
the real code paths (append, read, recovery, every codec, recompression,
producer snapshots, dump-log, the Spark reader) all land on those signatures.

Each check runs in a fresh interpreter, as a broker would start: a process
that earlier tests had warmed could hide a compile.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Runs in the child: import + warm-up, then spy on numba's dispatchers while
# the real code paths run.  Prints one JSON object.
REAL_PATHS = r'''
import json, os, sys, tempfile

import numpy as np
from numba.core.dispatcher import Dispatcher

from hpbroker.cli import dump_log
from hpbroker.kernels import jit, layout, scan_batches
from hpbroker.kernels.compile import load
from hpbroker.records import Record, encode_batch, encode_message_set
from hpbroker.records.batch_columns import data_batches, decode_scanned
from hpbroker.storage import Log, LogConfig

kernels = load()
# Every new specialization goes through Dispatcher.compile, compiled or loaded from a cache.
compiled = []
_compile = Dispatcher.compile


def spy(self, sig):
    compiled.append(f"{self.py_func.__module__}.{self.py_func.__qualname__}{sig}")
    return _compile(self, sig)


Dispatcher.compile = spy

T0 = 1_700_000_000_000
CODECS = (layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD)


def batch(n, codec, tag, **kw):
    records = [Record(i, T0 + i, f"{tag}{i}".encode(), (tag * 30).encode(), ()) for i in range(n)]
    return encode_batch(records, compression=codec, **kw)


def read_back(log):
    rows = 0
    for segment in log.segments:
        view = segment.view()
        scan = scan_batches(view, 0, len(view))
        for group in decode_scanned(view, scan, data_batches(scan)):
            rows += len(group.columns.offset)
    return rows


root = tempfile.mkdtemp()
config = LogConfig(segment_bytes=2000, index_interval_bytes=100)
log = Log.open(os.path.join(root, "t-0"), "t", 0, config)
expected = 0
for i in range(40):
    codec = CODECS[i % len(CODECS)]
    data = batch(1 + i % 4, codec, f"b{i}")
    log.append(data if i % 2 else bytearray(data))  # bytes are copied, a bytearray is stamped in place
    expected += 1 + i % 4
for seq in range(0, 12, 3):  # an idempotent producer: producer state, then its snapshot
    log.append(batch(3, layout.CODEC_NONE, "p", producer_id=7, producer_epoch=0, base_sequence=seq))
    expected += 3
log.flush()
assert len(log.segments) > 3
assert read_back(log) == expected
log.read_records(0, 1 << 20)
log.offset_for_timestamp(T0)
log.close()

# Reopen after a crash with a torn tail: recovery scans with CRCs and rebuilds the indexes.
log = Log.open(os.path.join(root, "t-0"), "t", 0, config)
directory = log.directory
for segment in log.segments:
    segment.close()
tail = sorted(f for f in os.listdir(directory) if f.endswith(".log"))[-1]
with open(os.path.join(directory, tail), "ab") as f:
    f.write(batch(2, layout.CODEC_NONE, "torn")[:40])
for name in os.listdir(directory):
    if name.endswith(".index") or name.endswith(".timeindex"):
        os.unlink(os.path.join(directory, name))
log = Log.open(directory, "t", 0, config, recovery_point=0)
assert read_back(log) == expected
log.close()

# A topic with compression.type: every incoming codec is recompressed (record decode).
recompressing = Log.open(os.path.join(root, "z-0"), "z", 0, LogConfig(compression_type="zstd"))
for i, codec in enumerate(CODECS):
    recompressing.append(bytearray(batch(3, codec, f"z{i}")))
recompressing.close()

# A compacted topic's cleaning pass: key hashes and the offset map (the cleaner's own kernels).
from hpbroker.storage import cleaner
compacted = Log.open(os.path.join(root, "c-0"), "c", 0,
                     LogConfig(cleanup_policy="compact", segment_bytes=1500, file_delete_delay_ms=0))
for i in range(30):
    keyed = [Record(j, T0, f"key-{(i + j) % 7}".encode(), b"v%d" % i, ()) for j in range(3)]
    compacted.append(bytearray(encode_batch(keyed, compression=CODECS[i % len(CODECS)])))
    if i % 5 == 4:
        compacted.roll()
assert not cleaner.clean_log(compacted, T0).aborted
compacted.close()

# Legacy message sets (CRC-32) and dump-log (a read-only mmap, not stopping at bad entries).
legacy = encode_message_set([Record(0, T0, b"k", b"v", ())], magic=1)
scan_batches(np.frombuffer(legacy, np.uint8))
scan_batches(np.frombuffer(bytearray(legacy), np.uint8)[::1], verify_crc=False)
with open(os.devnull, "w") as devnull:
    stdout, sys.stdout = sys.stdout, devnull
    try:
        dump_log.dump_segment(os.path.join(directory, tail), True)
    finally:
        sys.stdout = stdout

broker_paths = list(compiled)

# The Spark reader's path to Arrow (its own gather loop is not a kernel).
try:
    from hpbroker.spark import to_arrow
except ImportError:
    spark = "skipped"
else:
    view = np.frombuffer(b"".join(batch(4, codec, f"s{codec}") for codec in CODECS), np.uint8)
    scan = scan_batches(view)
    to_arrow.chunk_to_arrow(view, to_arrow.select(scan, np.ones(len(scan.position), bool)), 0, 1 << 62, "s", 0)
    spark = "ran"

# Other types are refused, not compiled.
refused = []
for name, args in (("batch_scan._scan", (np.zeros(8), 0, 8, True, 1, True)),
                   ("crc.crc32_ieee", (np.zeros(8, np.int32), 0, 8, 0))):
    try:
        kernels[name](*args)
    except TypeError:
        refused.append(name)

dispatcher_type = type(kernels["crc.crc32_ieee"])
lazy = {}
for module in ("crc", "batch_scan", "record_decode", "index_plan", "key_table"):
    namespace = vars(sys.modules[f"hpbroker.kernels.{module}"])
    for attr, value in namespace.items():
        if isinstance(value, dispatcher_type) and f"{module}.{attr}" not in kernels and value not in kernels.values():
            lazy[f"{module}.{attr}"] = {"inline": value.targetoptions.get("inline"),
                                        "signatures": len(value.signatures)}

print(json.dumps({
    "kernels": {name: {"can_compile": d._can_compile, "signatures": [str(s) for s in d.signatures],
                       "declared": [str(tuple(s)) for s in jit.DECLARED[name]]} for name, d in kernels.items()},
    "missing": {name: [str(s) for s in sigs] for name, sigs in jit.missing_signatures().items() if sigs},
    "broker_paths": broker_paths,
    "compiled": compiled,
    "spark": spark,
    "refused": refused,
    "lazy": lazy,
}))
'''


def run_child(code: str, **env) -> dict:
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_no_kernel_compiles_after_import_on_the_real_code_paths():
    report = run_child(REAL_PATHS)
    expected = {"batch_scan._count", "batch_scan._scan", "crc.crc32_ieee", "crc.crc32c_portable",
                "index_plan._plan", "record_decode._decode", "record_decode._decode_batch",
                "key_table._hash_keys", "key_table._put", "key_table._get"}
    assert expected <= report["kernels"].keys()
    for name, kernel in report["kernels"].items():
        assert kernel["can_compile"] is False, name
        assert kernel["signatures"] == kernel["declared"], name
    assert report["missing"] == {}
    # Nothing at all compiled while the broker's paths ran; nothing of the kernels afterwards.
    assert report["broker_paths"] == []
    assert [c for c in report["compiled"] if c.startswith("hpbroker.kernels.")] == []
    assert sorted(report["refused"]) == ["batch_scan._scan", "crc.crc32_ieee"]
    # The lazy ones are inline helpers: inlined into the kernels, never compiled on their own.
    assert report["lazy"], "the inline helpers should have been found"
    for name, helper in report["lazy"].items():
        assert helper == {"inline": "always", "signatures": 0}, name


CACHE_PATHS = r'''
import json
from hpbroker.cli import dump_log
from hpbroker.kernels import jit, layout, scan_batches
from hpbroker.kernels.compile import load
from hpbroker.records import Record, encode_batch, encode_message_set
from hpbroker.records.batch_columns import data_batches, decode_scanned
from hpbroker.storage import Log, LogConfig

kernels = load()
print(json.dumps({
    "cache_root": jit.CACHE_ROOT,
    "paths": {name: [d.stats.cache_path, jit.cache_dir(d.py_func.__code__.co_filename)] for name, d in kernels.items()},
    "compiled": {name: sum(d.stats.cache_misses.values()) for name, d in kernels.items()},
}))
'''


def test_a_cache_dir_elsewhere_is_seeded_from_the_install_time_cache(tmp_path):
    """With NUMBA_CACHE_DIR set (as the systemd units do), the kernels come
    from the copy of the package's own cache, not from the compiler."""
    here = run_child(CACHE_PATHS)
    for name, (numba_path, ours) in here["paths"].items():
        assert numba_path == ours, name
    if here["cache_root"] is not None:
        pytest.skip("this checkout's __pycache__ is not writable: no install-time cache to seed from")
    # The child above left the package's cache complete.
    there = run_child(CACHE_PATHS, NUMBA_CACHE_DIR=str(tmp_path))
    assert there["cache_root"] == str(tmp_path)
    for name, (numba_path, ours) in there["paths"].items():
        assert numba_path == ours and numba_path.startswith(str(tmp_path)), name
    assert there["compiled"] == {name: 0 for name in there["compiled"]}
