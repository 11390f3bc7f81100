"""The reader without Spark: plan + read_slice against a record-by-record model."""

import os
import struct

import numpy as np
import pyarrow as pa
import pytest

from hpbroker.records import Record, encode_message_set
from hpbroker.spark import plan
from hpbroker.spark.options import OptionError, Options
from hpbroker.spark.read import DataLossError, read_slice
from hpbroker.spark.source import start_offsets
from tests.spark.model import expected_rows, normalise
from tests.spark.segments import (
    ABORT,
    CODECS,
    COMMIT,
    HIGH_WATERMARK,
    LOG_START,
    RECOVERY,
    PartitionWriter,
    write_checkpoint,
)


def read_all(log_dir, **options):
    opts = Options.parse({"path": log_dir, "subscribe": "events", **options}, streaming=False)
    infos = plan.describe(opts)
    slices = []
    starts = start_offsets(opts, infos)
    for key, info in infos.items():
        start = starts[key]
        end = min(plan.resolve(opts.ending, info, "latest"), info.latest)
        slices += plan.slices(info, start, end, opts)
    batches = [b for s in slices for b in read_slice(s, chunk_bytes=4096)]
    return normalise(pa.Table.from_batches(batches).to_pylist() if batches else []), slices


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_matches_the_model(log_dir, codec):
    w = PartitionWriter(log_dir, "events", 0)
    for n in (1, 37, 200):
        w.append_values(n, compression=CODECS[codec], headers=True, value_size=50)
    w.append_values(5, compression=CODECS[codec], timestamp_type=1)  # LogAppendTime
    rows, _ = read_all(log_dir)
    assert rows == expected_rows(w.path, "events", 0)
    assert [r["timestampType"] for r in rows[-5:]] == [1] * 5
    assert any(r["key"] is None for r in rows) and any(r["value"] is None for r in rows)


def test_control_batches_are_skipped_and_aborted_ones_with_read_committed(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    w.append_values(3)
    a_first, _ = w.append_values(4, producer_id=7, producer_epoch=0, transactional=True)
    w.append_values(2)
    c_first, _ = w.append_values(4, producer_id=8, producer_epoch=0, transactional=True)
    abort_at = w.marker(ABORT, 7)
    w.marker(COMMIT, 8)
    w.append_values(2)
    w.txnindex([(7, a_first, abort_at)])
    uncommitted, _ = read_all(log_dir)
    committed, _ = read_all(log_dir, isolation="read_committed")
    assert uncommitted == expected_rows(w.path, "events", 0)
    assert len(uncommitted) == 15  # the two markers use offsets but are no rows
    assert committed == expected_rows(w.path, "events", 0, aborted=[(7, a_first, abort_at)])
    assert {r["offset"] for r in uncommitted} - {r["offset"] for r in committed} == set(range(a_first, a_first + 4))


def test_read_committed_stops_at_an_open_transaction(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    w.append_values(3, producer_id=5, producer_epoch=0, transactional=True)
    w.roll()  # the transaction goes on in the next segment
    w.append_values(2)
    w.append_values(3, producer_id=5, producer_epoch=0, transactional=True)
    w.append_values(2)
    rows, _ = read_all(log_dir, isolation="read_committed")
    assert rows == []
    w.marker(COMMIT, 5)
    rows, _ = read_all(log_dir, isolation="read_committed")
    assert [r["offset"] for r in rows] == list(range(10))


def test_torn_tail_is_not_read(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    w.append_values(10)
    w.append_values(10)
    log = os.path.join(w.path, "00000000000000000000.log")
    size = os.path.getsize(log)
    w.append_values(10)
    os.truncate(log, size + 30)  # the last batch half written
    rows, _ = read_all(log_dir)
    assert [r["offset"] for r in rows] == list(range(20))
    with open(log, "r+b") as f:  # now a complete batch with a bad CRC at the end
        f.seek(size + 30)
        f.truncate()
    w2 = PartitionWriter(log_dir, "events", 0)
    w2.next_offset, w2.base = 20, 0
    w2.append_values(10)
    with open(log, "r+b") as f:
        f.seek(size + 70)
        f.write(b"\xff")
    rows, _ = read_all(log_dir)
    assert [r["offset"] for r in rows] == list(range(20))


def test_checkpoints_bound_the_read(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    for _ in range(5):
        w.append_values(10)
    # The high watermark is what a live broker's consumers may see; the
    # recovery point (flushed prefix) bounds only a layout without one.
    write_checkpoint(log_dir, RECOVERY, {("events", 0): 30})
    write_checkpoint(log_dir, LOG_START, {("events", 0): 5})
    rows, _ = read_all(log_dir)
    assert [r["offset"] for r in rows] == list(range(5, 30))
    write_checkpoint(log_dir, HIGH_WATERMARK, {("events", 0): 40})
    rows, _ = read_all(log_dir)
    assert [r["offset"] for r in rows] == list(range(5, 40))
    rows, _ = read_all(log_dir, useCheckpoints="false")
    assert [r["offset"] for r in rows] == list(range(50))


def test_replicas_in_several_brokers_dirs_are_read_once_from_the_most_advanced(tmp_path):
    """A cluster's brokers each hold a replica in their own log dir; a glob
    names them all, and each partition is read from the replica with the
    highest high watermark, up to it and no further."""
    lagging, ahead = tmp_path / "broker-1" / "data", tmp_path / "broker-2" / "data"
    for log_dir, written, high_watermark in ((lagging, 3, 20), (ahead, 5, 40)):
        w = PartitionWriter(str(log_dir), "events", 0)
        for _ in range(written):
            w.append_values(10)
        write_checkpoint(str(log_dir), HIGH_WATERMARK, {("events", 0): high_watermark})
    only_one = tmp_path / "broker-3" / "data"
    PartitionWriter(str(only_one), "events", 1).append_values(7)
    write_checkpoint(str(only_one), HIGH_WATERMARK, {("events", 1): 7})
    rows, slices = read_all(str(tmp_path / "broker-*" / "data"))
    assert {s.path.split(os.sep)[-3] for s in slices if s.partition == 0} == {"broker-2"}
    assert [r["offset"] for r in rows if r["partition"] == 0] == list(range(40))
    assert [r["offset"] for r in rows if r["partition"] == 1] == list(range(7))
    with pytest.raises(FileNotFoundError, match="no log directory matches"):
        read_all(str(tmp_path / "nothing-*"))


def test_offset_ranges_and_splits(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    for _ in range(6):
        w.append_values(100, value_size=60, compression=CODECS["lz4"])
        w.roll()
    rows, slices = read_all(log_dir, startingOffsets='{"events": {"0": 150}}', endingOffsets='{"events": {"0": 421}}',
                            maxBytesPerPartition="2000")
    assert [r["offset"] for r in rows] == list(range(150, 421))
    assert len({s.base for s in slices}) == 4
    # uncompressed, one big segment: split at index entries
    big = os.path.join(log_dir, "big")
    w = PartitionWriter(big, "events", 0)
    for _ in range(40):
        w.append_values(20, value_size=100)
    rows, slices = read_all(big, maxBytesPerPartition="20000", startingOffsets='{"events": {"0": 7}}')
    assert len(slices) > 3 and [s.start for s in slices] == sorted(s.start for s in slices)
    assert [r["offset"] for r in rows] == list(range(7, 800))


def test_starting_timestamp(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    for _ in range(4):
        w.append_values(25)
    from tests.spark.segments import T0
    rows, _ = read_all(log_dir, startingTimestamp=str(T0 + 60))
    assert rows[0]["offset"] == 60 and len(rows) == 40


def test_legacy_message_sets(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    msgs = [Record(i, 1000 + i, b"k", b"v%d" % i) for i in range(4)]
    w.append_raw(encode_message_set(msgs, magic=1, compression=CODECS["gzip"]), 3)
    w.append_values(3)
    rows, _ = read_all(log_dir)
    assert [r["offset"] for r in rows] == list(range(7))
    assert rows[2]["value"] == b"v2" and rows[2]["timestamp_ms"] == 1002


def test_corruption_inside_the_planned_range_is_data_loss(log_dir):
    w = PartitionWriter(log_dir, "events", 0)
    w.append_values(10)
    w.roll()
    w.append_values(10)
    opts = Options.parse({"path": log_dir, "subscribe": "events"}, streaming=False)
    info = plan.describe(opts)[("events", 0)]
    slices = plan.slices(info, 0, info.latest, opts)
    with open(os.path.join(w.path, "00000000000000000000.log"), "r+b") as f:
        f.seek(70)
        f.write(b"\x00\x01")
    with pytest.raises(DataLossError):
        list(read_slice(slices[0]))


def test_txnindex_layout_is_kafkas():
    from hpbroker.spark.txnindex import ENTRY
    raw = struct.pack(">hqqqq", 0, 42, 100, 200, 90)
    row = np.frombuffer(raw, ENTRY)[0]
    assert ((row["producer_id"], row["first_offset"], row["last_offset"], row["last_stable_offset"])
            == (42, 100, 200, 90))


def test_options_are_checked(log_dir):
    with pytest.raises(OptionError):
        Options.parse({"path": log_dir}, streaming=False)
    with pytest.raises(OptionError):
        Options.parse({"path": log_dir, "topic": "a", "subscribePattern": "b"}, streaming=False)
    with pytest.raises(OptionError):
        Options.parse({"path": log_dir, "topic": "a", "startingOffsets": "{bad"}, streaming=False)
