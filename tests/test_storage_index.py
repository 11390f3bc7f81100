"""Offset and time index files: byte layout, and lookups against a sorted-list model."""

import bisect
import os
import struct

from hypothesis import given, settings, strategies as st

from hpbroker.storage import checkpoints
from hpbroker.storage.offset_index import OffsetIndex
from hpbroker.storage.time_index import TimeIndex

BASE = 1000


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.tuples(st.integers(1, 500), st.integers(1, 9000)), max_size=200),
       probes=st.lists(st.integers(BASE - 10, BASE + 60_000), max_size=40))
def test_offset_index_lookup_matches_bisect(tmp_path_factory, gaps, probes):
    path = str(tmp_path_factory.mktemp("idx") / "00000000000000001000.index")
    index = OffsetIndex(path, BASE, 10 * 1024 * 1024)
    offsets, positions = [], []
    offset, position = BASE, 0
    for d_off, d_pos in gaps:
        offset, position = offset + d_off, position + d_pos
        index.append(offset, position)
        offsets.append(offset)
        positions.append(position)
    for probe in probes:
        i = bisect.bisect_right(offsets, probe) - 1
        assert index.lookup(probe) == (positions[i] if i >= 0 else 0)
    index.flush()
    with open(path, "rb") as f:
        raw = f.read()
    assert raw == b"".join(struct.pack(">ii", o - BASE, p) for o, p in zip(offsets, positions))
    index.close()
    reloaded = OffsetIndex(path, BASE, 10 * 1024 * 1024)
    assert reloaded.keys().tolist() == [o - BASE for o in offsets]
    cut = probes[0] if probes else BASE
    reloaded.truncate_to(cut)
    assert reloaded.keys().tolist() == [o - BASE for o in offsets if o < cut]


@settings(max_examples=60, deadline=None)
@given(stamps=st.lists(st.tuples(st.integers(-5, 1000), st.integers(0, 50)), max_size=200),
       probes=st.lists(st.integers(0, 60_000), max_size=40))
def test_time_index_keeps_increasing_timestamps_and_looks_up_the_floor(tmp_path_factory, stamps, probes):
    path = str(tmp_path_factory.mktemp("tidx") / "00000000000000001000.timeindex")
    index = TimeIndex(path, BASE, 10 * 1024 * 1024)
    model_ts, model_off = [], []
    ts, offset = 0, BASE
    for d_ts, d_off in stamps:
        ts, offset = ts + d_ts, offset + d_off
        index.maybe_append(ts, offset)
        if not model_ts or ts > model_ts[-1]:
            model_ts.append(ts)
            model_off.append(offset)
    for probe in probes:
        i = bisect.bisect_right(model_ts, probe) - 1
        assert index.lookup(probe) == ((model_ts[i], model_off[i]) if i >= 0 else (-1, BASE))
    index.flush()
    with open(path, "rb") as f:
        assert f.read() == b"".join(struct.pack(">qi", t, o - BASE) for t, o in zip(model_ts, model_off))


def test_entries_reach_the_file_together_and_a_truncate_cuts_what_was_written(tmp_path):
    path = str(tmp_path / "00000000000000001000.index")
    index = OffsetIndex(path, BASE, 1024)
    for i in range(4):
        index.append(BASE + 10 * (i + 1), 100 * (i + 1))
    assert os.path.getsize(path) == 0  # until a flush, a close or a roll asks for them
    assert index.lookup(BASE + 25) == 200
    index.flush()
    assert os.path.getsize(path) == 4 * 8
    index.append(BASE + 50, 500)
    index.truncate_to(BASE + 30)  # one entry in the file goes, and the one only in memory
    assert index.keys().tolist() == [10, 20]
    assert os.path.getsize(path) == 2 * 8
    index.append(BASE + 35, 350)
    index.close()
    assert OffsetIndex(path, BASE, 1024).keys().tolist() == [10, 20, 35]


def test_index_full_is_reported(tmp_path):
    index = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 8 * 3)
    for i in range(3):
        assert not index.is_full
        index.append(i + 1, (i + 1) * 100)
    assert index.is_full


def test_checkpoint_text_format_round_trip(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    checkpoints.write_offset_checkpoint(path, {("b", 1): 7, ("a", 10): 0, ("a", 2): 99})
    with open(path) as f:
        assert f.read() == "0\n3\na 2 99\na 10 0\nb 1 7\n"
    assert checkpoints.read_offset_checkpoint(path) == {("a", 2): 99, ("a", 10): 0, ("b", 1): 7}
    assert checkpoints.read_offset_checkpoint(str(tmp_path / "missing")) == {}


def test_kafka_uuid_strings_are_url_safe_base64_without_padding():
    value = checkpoints.new_kafka_uuid()
    text = checkpoints.kafka_uuid_string(value)
    assert len(text) == 22 and "=" not in text and checkpoints.parse_kafka_uuid(text) == value
