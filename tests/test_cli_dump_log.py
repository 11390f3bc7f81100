"""``hpbroker dump-log`` on real segment files, run as a user would run it."""

import os
import subprocess
import sys

from hpbroker.kernels import layout
from hpbroker.records import Header, Record, encode_batch
from hpbroker.storage import Log, LogConfig


def hpbroker(*args):
    return subprocess.run([sys.executable, "-m", "hpbroker", *args], capture_output=True, text=True, timeout=120)


def make_log(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(index_interval_bytes=10))
    for i in range(4):
        records = [Record(offset=0, timestamp=1000 + i, key=f"key{i}".encode(), value=f"value {i}".encode(),
                          headers=(Header(b"h", b"v"),))]
        log.append(encode_batch(records, compression=layout.CODEC_GZIP if i == 2 else layout.CODEC_NONE))
    log.close()
    return log.segments[0].log_path


def test_one_line_per_batch_and_records(tmp_path):
    path = make_log(tmp_path)
    result = hpbroker("dump-log", "--records", path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batch_lines) == 4
    assert "compresscodec: gzip" in batch_lines[2] and "isvalid: true" in batch_lines[0]
    assert ("| offset: 3 CreateTime: 1003 keySize: 4 valueSize: 7 sequence: -1 headerKeys: [h] key: key3 "
            "payload: value 3") in lines


def test_index_files_are_dumped_and_checked_against_the_log(tmp_path):
    path = make_log(tmp_path)
    result = hpbroker("dump-log", "--index", path)
    assert result.returncode == 0, result.stderr
    assert "offset: 1 position:" in result.stdout and "timestamp: 1001 offset: 1" in result.stdout
    index = path[:-4] + ".index"
    with open(index, "r+b") as f:
        f.seek(4)
        f.write(b"\x00\x00\x00\x01")  # point the first entry at byte 1
    result = hpbroker("dump-log", index)
    assert result.returncode == 1 and "Index mismatch" in result.stdout


def test_corruption_is_reported_not_raised(tmp_path):
    path = make_log(tmp_path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - 3)
        f.write(b"\xff")
        f.seek(0, os.SEEK_END)
        f.write(b"\x00\x01\x02")
    result = hpbroker("dump-log", path)
    assert result.returncode == 1
    assert "isvalid: false" in result.stdout.splitlines()[-2]
    assert "Found corruption at position" in result.stdout and "Traceback" not in result.stderr


def test_a_missing_file_is_one_readable_line(tmp_path):
    result = hpbroker("dump-log", str(tmp_path / "nope.log"))
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "no such file" in result.stderr


def test_help_lists_the_commands():
    result = hpbroker("--help")
    assert result.returncode == 0 and all(c in result.stdout for c in ("dump-log", "serve", "cluster", "topics"))
