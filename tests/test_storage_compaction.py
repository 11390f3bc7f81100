"""Log compaction (``hpbroker.storage.cleaner`` and the modules it uses): a
keyed log checked record by record against a model, delete horizons, empty producer batches, crashes in
the middle of a swap, the cleaner checkpoint, and a pass beside appends."""

import os
import shutil
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hpbroker.kernels import layout, scan_batches
from hpbroker.records import Record, encode_batch
from hpbroker.storage import (
    InvalidRecordError,
    Log,
    LogConfig,
    LogManager,
    checkpoints,
    cleaner,
    cleaner_plan,
    filenames,
)
from hpbroker.storage.batch_filter import BatchFacts, Verdict, verdict
from hpbroker.storage.config import ConfigError
from hpbroker.storage.segment import LogSegment
from tests.log_helpers import batches_in

T0 = 1_700_000_000_000
DAY = 86_400_000
CODECS = [layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD]


def compact_config(**overrides) -> LogConfig:
    values: dict[str, Any] = dict(segment_bytes=1500, cleanup_policy="compact", file_delete_delay_ms=0,
                                  index_interval_bytes=100, delete_retention_ms=DAY, retention_ms=-1)
    values.update(overrides)
    return LogConfig(**values)


def open_log(directory, config=None, **kwargs) -> Log:
    return Log.open(str(directory), "c", 0, config or compact_config(), **kwargs)


def keyed(pairs, *, ts=T0, codec=0, **kwargs) -> bytes:
    """One batch of (key, value) pairs; value None is a tombstone."""
    records = [Record(offset=i, timestamp=ts + i, key=k, value=v) for i, (k, v) in enumerate(pairs)]
    return encode_batch(records, compression=codec, **kwargs)


def read_batches(log: Log, start: int | None = None):
    """Every batch from ``start`` on, advancing by each batch's last offset as
    consumers do (a batch may have lost all its records)."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.written_offset:
        data = log.read_records(offset, 1 << 16)
        assert data, f"nothing at {offset} below {log.written_offset}"
        for batch in batches_in(data):
            assert batch.header.last_offset >= offset
            out.append(batch)
            offset = batch.header.last_offset + 1
    return out


def read_records(log: Log, start: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
    first = log.log_start_offset if start is None else start
    return [(r.offset, r.key, r.value) for b in read_batches(log, start) for r in b.records if r.offset >= first]


def data_records(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """``read_records`` without the transaction markers."""
    return [(r.offset, r.key, r.value) for b in read_batches(log) if not b.header.is_control for r in b.records]


def check_indexes(log: Log) -> None:
    """Each segment's ``.index``/``.timeindex`` equal what recovery rebuilds from the ``.log``."""
    for segment in log.segments[:-1]:
        copy_dir = segment.directory + "-indexcheck"
        os.makedirs(copy_dir, exist_ok=True)
        shutil.copy(segment.log_path, copy_dir)
        rebuilt = LogSegment(copy_dir, segment.base_offset, index_interval_bytes=log.config.index_interval_bytes,
                             max_index_bytes=log.config.segment_index_bytes, created_ms=0)
        rebuilt.recover()
        assert np.array_equal(segment.offset_index.keys(), rebuilt.offset_index.keys())
        assert np.array_equal(segment.offset_index.values(), rebuilt.offset_index.values())
        assert np.array_equal(segment.time_index.keys(), rebuilt.time_index.keys())
        assert np.array_equal(segment.time_index.values(), rebuilt.time_index.values())
        assert segment.next_offset == rebuilt.next_offset
        rebuilt.close()
        shutil.rmtree(copy_dir)


def expected_after_clean(history, end: int, horizon_passed: bool = False):
    """The model: below ``end`` only each key's last record (tombstones too,
    unless their horizon passed); from ``end`` on everything."""
    last = {}
    for offset, key, value in history:
        if offset < end:
            last[key] = offset
    keep = []
    for offset, key, value in history:
        if offset >= end:
            keep.append((offset, key, value))
        elif last[key] == offset and not (value is None and horizon_passed):
            keep.append((offset, key, value))
    return keep


# --- the model test -----------------------------------------------------------------

BATCHES = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 9), st.one_of(st.none(), st.binary(min_size=0, max_size=40))),
                 min_size=1, max_size=6),
        st.sampled_from(CODECS),
        st.booleans(),  # roll after this batch
    ),
    min_size=1, max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=BATCHES, segment_bytes=st.integers(300, 3000))
def test_compaction_matches_a_dict_model(tmp_path_factory, batches, segment_bytes):
    directory = tmp_path_factory.mktemp("model") / "c-0"
    log = open_log(directory, compact_config(segment_bytes=segment_bytes))
    history = []
    for pairs, codec, roll in batches:
        encoded = [(f"key-{k}".encode(), v) for k, v in pairs]
        info = log.append(keyed(encoded, codec=codec))
        history.extend((info.first_offset + i, k, v) for i, (k, v) in enumerate(encoded))
        if roll:
            log.roll()
    end = log.active_segment.base_offset
    before = read_records(log)
    assert before == history

    result = cleaner.clean_log(log, T0)
    assert not result.aborted
    assert result.end_offset == (end if len(log.segments) > 1 else -1)
    after = read_records(log)
    assert after == expected_after_clean(history, end)
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(set(offsets))
    # The latest value of every key (tombstones included) is where it was.
    latest = {k: (o, v) for o, k, v in history}
    assert {k: (o, v) for o, k, v in after} == latest
    # Reading from any offset gives the kept records from there on.
    for offset in range(0, log.written_offset, 3):
        assert read_records(log, offset) == [r for r in after if r[0] >= offset]
    check_indexes(log)
    # Batches keep their codec and their offsets stay within the original batch.
    for batch in read_batches(log):
        if batch.header.record_count:
            assert all(batch.header.base_offset <= r.offset <= batch.header.last_offset for r in batch.records)

    # A pass past every horizon removes the tombstones; a reopen sees the same log.
    result = cleaner.clean_log(log, T0 + 2 * DAY)
    final = expected_after_clean(history, end, horizon_passed=True)
    assert read_records(log) == final
    check_indexes(log)
    log.close()
    reopened = open_log(directory)
    assert read_records(reopened) == final
    reopened.close()


# --- tombstones, horizons, batches ------------------------------------------------------

def test_tombstones_survive_until_the_delete_horizon(tmp_path):
    log = open_log(tmp_path / "c-0", compact_config(delete_retention_ms=1000))
    log.append(keyed([(b"a", b"1"), (b"b", b"1")]))
    log.append(keyed([(b"a", None)]))
    log.roll()
    log.append(keyed([(b"z", b"active")]))

    cleaner.clean_log(log, T0)
    assert read_records(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"z", b"active")]
    tomb_batch = [b for b in read_batches(log) if any(r.value is None for r in b.records)][0]
    # KIP-534: bit 6 set and the horizon in baseTimestamp; the record's own timestamp kept.
    assert tomb_batch.header.has_delete_horizon
    assert tomb_batch.header.base_timestamp == T0 + 1000
    assert tomb_batch.records[0].timestamp == T0
    assert log.latest_delete_horizon == T0 + 1000

    cleaner.clean_log(log, T0 + 999)  # before the horizon: still there
    assert (2, b"a", None) in read_records(log)
    plan = cleaner_plan.plan(log, T0 + 1000)
    assert plan is not None
    assert plan.delete_horizon_passed and plan.worth_cleaning(0.5)
    cleaner.clean_log(log, T0 + 1000)
    assert read_records(log) == [(1, b"b", b"1"), (3, b"z", b"active")]
    assert log.latest_delete_horizon == -1
    log.close()


def test_a_marker_lives_while_its_transaction_keeps_data_then_as_long_as_tombstones(tmp_path):
    """Kafka's rule: a COMMIT marker whose transaction still has records before
    it stays (a replay from the log start would find that transaction open
    forever without it); once they are compacted away it goes with the first
    pass after its delete horizon."""
    from hpbroker.records import encode_control_batch
    from hpbroker.storage.log import ORIGIN_COORDINATOR

    log = open_log(tmp_path / "c-0", compact_config(delete_retention_ms=1000))
    log.append(keyed([(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True))
    log.append(encode_control_batch(1, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=T0),
               origin=ORIGIN_COORDINATOR)
    log.append(keyed([(b"b", b"2")]))
    log.roll()
    cleaner.clean_log(log, T0)
    control = [b for b in read_batches(log) if b.header.is_control]
    assert len(control) == 1 and control[0].header.has_delete_horizon
    cleaner.clean_log(log, T0 + 1000)
    assert len([b for b in read_batches(log) if b.header.is_control]) == 1  # "a" is still its transaction's
    assert data_records(log) == [(0, b"a", b"1"), (2, b"b", b"2")]

    log.append(keyed([(b"a", b"3")]))  # supersedes the transaction's only record
    log.roll()
    cleaner.clean_log(log, T0 + 1000)
    batches = read_batches(log)
    assert not [b for b in batches if b.header.is_control]
    emptied = batches[0]  # the producer's header stays, holding no transaction any more
    assert emptied.header.producer_id == 7 and not emptied.records and not emptied.header.is_transactional
    assert data_records(log) == [(2, b"b", b"2"), (3, b"a", b"3")]
    log.close()


def test_an_aborted_transaction_is_dropped_and_shadows_nothing(tmp_path):
    """Kafka's cleaner removes aborted records, and never lets one decide which
    record of its key is the latest: the committed value before it survives."""
    from hpbroker.records import encode_control_batch
    from hpbroker.storage.log import ORIGIN_COORDINATOR

    log = open_log(tmp_path / "c-0", compact_config(delete_retention_ms=1000))
    log.append(keyed([(b"k", b"committed")]))
    log.append(keyed([(b"k", b"aborted"), (b"x", b"aborted")], producer_id=9, producer_epoch=0, base_sequence=0,
                     transactional=True))
    log.append(encode_control_batch(0, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=T0),
               origin=ORIGIN_COORDINATOR)
    log.append(keyed([(b"y", b"after")]))
    log.roll()
    assert log.aborted_transactions(0, log.high_watermark)
    cleaner.clean_log(log, T0)
    assert data_records(log) == [(0, b"k", b"committed"), (4, b"y", b"after")]
    # the abort marker holds no data of its transaction any more: it goes after its horizon
    assert len([b for b in read_batches(log) if b.header.is_control]) == 1
    cleaner.clean_log(log, T0 + 1000)
    assert not [b for b in read_batches(log) if b.header.is_control]
    assert data_records(log) == [(0, b"k", b"committed"), (4, b"y", b"after")]
    log.close()
    reopened = open_log(tmp_path / "c-0", compact_config(delete_retention_ms=1000))
    assert reopened.last_stable_offset == reopened.high_watermark  # nothing left open by the cleaning
    reopened.close()


def test_an_idempotent_batch_that_loses_all_records_stays_as_an_empty_batch(tmp_path):
    log = open_log(tmp_path / "c-0")
    pid = 99
    for seq in range(0, 6, 2):  # three batches of two records, all the same key
        log.append(keyed([(b"k", b"x%d" % seq), (b"k", b"y%d" % seq)], ts=T0, producer_id=pid, producer_epoch=3,
                         base_sequence=seq))
    log.append(keyed([(b"k", b"plain")]))  # no producer id: may vanish
    log.append(keyed([(b"other", b"last")]))
    log.roll()
    cleaner.clean_log(log, T0)
    batches = read_batches(log)
    empty = [b for b in batches if b.header.record_count == 0]
    assert [(b.header.base_offset, b.header.last_offset, b.header.base_sequence) for b in empty] \
        == [(0, 1, 0), (2, 3, 2), (4, 5, 4)]
    for b in empty:
        assert (b.header.producer_id, b.header.producer_epoch, b.header.batch_length) \
            == (pid, 3, layout.BATCH_HEADER_SIZE - 12)
    assert read_records(log) == [(6, b"k", b"plain"), (7, b"other", b"last")]
    # The producer state still knows the last sequence after a crash and a replay.
    log.close()
    for name in os.listdir(log.directory):
        if name.endswith(filenames.SNAPSHOT_SUFFIX):
            os.unlink(os.path.join(log.directory, name))
    reopened = open_log(log.directory)
    entry = reopened.producer_state.entry(pid)
    assert entry is not None and entry.last_seq == 5
    reopened.append(keyed([(b"k", b"next")], producer_id=pid, producer_epoch=3, base_sequence=6))
    reopened.close()


def test_partial_batches_keep_their_header_and_codec(tmp_path):
    log = open_log(tmp_path / "c-0", compact_config(segment_bytes=100_000))
    log.append(keyed([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], codec=layout.CODEC_ZSTD, producer_id=5,
                     producer_epoch=1, base_sequence=0))
    log.append(keyed([(b"b", b"2")]))
    log.roll()
    cleaner.clean_log(log, T0)
    first = read_batches(log)[0]
    h = first.header
    assert (h.base_offset, h.last_offset, h.record_count, h.compression) == (0, 2, 2, layout.CODEC_ZSTD)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (5, 1, 0)
    assert [(r.offset, r.key) for r in first.records] == [(0, b"a"), (2, b"c")]
    assert h.max_timestamp == T0 + 2
    log.close()


def test_a_compacted_topic_rejects_records_without_a_key(tmp_path):
    log = open_log(tmp_path / "c-0")
    for codec in (layout.CODEC_NONE, layout.CODEC_GZIP):
        with pytest.raises(InvalidRecordError):
            log.append(keyed([(b"a", b"1"), (None, b"2")], codec=codec))
    assert log.log_end_offset == 0
    log.close()
    plain = open_log(tmp_path / "d-0", compact_config(cleanup_policy="delete"))
    plain.append(keyed([(None, b"2")]))
    plain.close()


def test_the_active_segment_and_the_compaction_lag_are_left_alone(tmp_path):
    log = open_log(tmp_path / "c-0", compact_config(min_compaction_lag_ms=10_000))
    log.append(keyed([(b"a", b"1")], ts=T0))
    log.append(keyed([(b"a", b"2")], ts=T0))
    log.roll()
    log.append(keyed([(b"a", b"3")], ts=T0 + 60_000))
    log.append(keyed([(b"a", b"4")], ts=T0 + 60_000))
    log.roll()
    log.append(keyed([(b"a", b"5")], ts=T0 + 60_000))
    result = cleaner.clean_log(log, T0 + 65_000)  # the second segment is younger than the lag
    assert result.end_offset == 2
    assert read_records(log) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4"), (4, b"a", b"5")]
    cleaner.clean_log(log, T0 + 80_000)
    assert read_records(log) == [(3, b"a", b"4"), (4, b"a", b"5")]
    log.close()


def test_dirty_ratio_and_max_compaction_lag_decide_eligibility(tmp_path):
    log = open_log(tmp_path / "c-0", compact_config(segment_bytes=100_000, max_compaction_lag_ms=DAY))
    for i in range(20):
        log.append(keyed([(b"k%d" % i, b"v" * 50)], ts=T0))
    log.roll()
    first = cleaner_plan.plan(log, T0)
    assert first is not None and first.dirty_ratio == 1.0
    cleaner.clean_log(log, T0)
    log.append(keyed([(b"k0", b"new")], ts=T0))
    log.roll()
    plan = cleaner_plan.plan(log, T0)
    assert plan is not None
    assert 0 < plan.dirty_ratio < 0.5 and not plan.worth_cleaning(0.5)
    assert plan.worth_cleaning(0.01)
    late = cleaner_plan.plan(log, T0 + DAY + 1)
    assert late is not None
    assert late.max_lag_exceeded and late.worth_cleaning(0.5)
    log.close()


def test_compact_delete_applies_both(tmp_path):
    log = open_log(tmp_path / "c-0", compact_config(cleanup_policy="compact,delete", retention_ms=1000))
    log.append(keyed([(b"a", b"1")], ts=T0))
    log.roll()
    log.append(keyed([(b"a", b"2")], ts=T0 + 5000))
    log.append(keyed([(b"b", b"1")], ts=T0 + 5000))
    log.roll()
    log.append(keyed([(b"c", b"1")], ts=T0 + 5000))
    cleaner.clean_log(log, T0 + 5000)
    assert read_records(log) == [(1, b"a", b"2"), (2, b"b", b"1"), (3, b"c", b"1")]
    assert [s.base_offset for s in log.segments] == [0, 3]  # both cleaned into one
    assert log.delete_old_segments(T0 + 5500) == 0
    assert log.delete_old_segments(T0 + 7000) == 1
    assert log.log_start_offset == 3
    assert read_records(log) == [(3, b"c", b"1")]
    log.close()


def test_config_keys():
    config = LogConfig.from_broker_properties({"log.cleaner.min.cleanable.ratio": "0.25",
                                               "log.cleaner.min.compaction.lag.ms": "5"})
    assert (config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms) == (0.25, 5)
    topic = config.with_overrides({"min.cleanable.dirty.ratio": "0.9", "max.compaction.lag.ms": "100",
                                   "cleanup.policy": "delete,compact"})
    assert (topic.min_cleanable_dirty_ratio, topic.max_compaction_lag_ms, topic.compact) == (0.9, 100, True)
    assert topic.topic_properties()["min.cleanable.dirty.ratio"] == "0.9"
    with pytest.raises(ConfigError):
        config.with_overrides({"min.cleanable.dirty.ratio": "1.5"})


# --- crashes -------------------------------------------------------------------------------

class Crash(Exception):
    pass


def _crash_fixture(directory, segment_bytes=400):
    """Inactive segments of superseded records (two of 400 bytes, or one), one active."""
    log = open_log(directory, compact_config(segment_bytes=segment_bytes))
    for round_ in range(3):
        for key in (b"a", b"b", b"c"):
            log.append(keyed([(key, b"%s-%d" % (key, round_))]))
    log.roll()
    log.append(keyed([(b"a", b"active")]))
    return log


def _state(directory):
    log = open_log(directory)
    try:
        return read_records(log), [s.base_offset for s in log.segments]
    finally:
        log.close()


def _crashed_copy(log, tmp_path, name):
    """The directory as a crash leaves it: files as they are, nothing closed or flushed."""
    copy = tmp_path / name
    shutil.copytree(log.directory, copy)
    return copy


@pytest.mark.parametrize("where", ["cleaned", "swap", "deleted", "swapped-first-of-two"])
def test_a_crash_in_the_middle_leaves_the_before_or_the_after_state(tmp_path, monkeypatch, where):
    # One group per pass, so that a crash at its swap has one before and one after state;
    # with two groups the crash comes at the second swap.
    segment_bytes = 400 if where == "swapped-first-of-two" else 1000
    twin = _crash_fixture(tmp_path / "twin" / "c-0", segment_bytes)
    assert len(twin.segments) == (3 if segment_bytes == 400 else 2)
    before = read_records(twin)
    cleaner.clean_log(twin, T0)
    twin.close()
    after = _state(tmp_path / "twin" / "c-0")
    assert after[0] != before

    log = _crash_fixture(tmp_path / "main" / "c-0", segment_bytes)
    real_change_suffix = LogSegment.change_suffix
    real_replace = Log.replace_segments
    swaps = []

    def change_suffix(self, suffix):
        if where == "cleaned" and suffix == filenames.SWAP_SUFFIX:
            raise Crash()  # cleaned files written, never renamed
        if where == "deleted" and suffix == "":
            raise Crash()  # old files renamed .deleted, new still .swap
        return real_change_suffix(self, suffix)

    def replace(self, old, new):
        swaps.append(new.base_offset)
        if where == "swap" or (where == "swapped-first-of-two" and len(swaps) == 2):
            raise Crash()  # .swap files next to the originals
        return real_replace(self, old, new)

    monkeypatch.setattr(LogSegment, "change_suffix", change_suffix)
    monkeypatch.setattr(Log, "replace_segments", replace)
    with pytest.raises(Crash):
        cleaner.clean_log(log, T0)
    monkeypatch.undo()
    names = os.listdir(log.directory)
    expected_suffix = {"cleaned": filenames.CLEANED_SUFFIX, "swap": filenames.SWAP_SUFFIX,
                       "deleted": filenames.SWAP_SUFFIX, "swapped-first-of-two": filenames.SWAP_SUFFIX}[where]
    assert any(n.endswith(expected_suffix) for n in names)
    copy = _crashed_copy(log, tmp_path, "crashed-c-0")
    records, bases = _state(copy)
    if where == "cleaned":
        assert records == before
    elif where == "swapped-first-of-two":
        # The first group was swapped, the second completed by recovery: the whole pass.
        assert records == after[0]
    else:
        assert (records, bases) == after
    assert not [n for n in os.listdir(copy) if n.endswith(filenames.TRANSIENT_SUFFIXES)]
    # A pass after recovery finishes the job.
    reopened = open_log(copy)
    cleaner.clean_log(reopened, T0)
    assert read_records(reopened) == after[0]
    check_indexes(reopened)
    reopened.close()


def test_a_crash_in_the_middle_of_a_multi_segment_group(tmp_path, monkeypatch):
    """A second pass merges small cleaned segments into one: a crash with its
    ``.swap`` beside all of them must replace exactly those."""
    log = _crash_fixture(tmp_path / "c-0")
    cleaner.clean_log(log, T0)
    for key in (b"x", b"y"):
        log.append(keyed([(key, b"1")]))
        log.roll()
    cleaner.clean_log(log, T0)  # the segments now fit one group
    before = read_records(log)
    monkeypatch.setattr(Log, "replace_segments", lambda self, old, new: (_ for _ in ()).throw(Crash()))
    log.append(keyed([(b"x", b"2")]))
    log.roll()
    with pytest.raises(Crash):
        cleaner.clean_log(log, T0)
    monkeypatch.undo()
    records, bases = _state(_crashed_copy(log, tmp_path, "crashed-c-0"))
    expected = [r for r in before if r[1] != b"x"] + [(log.log_end_offset - 1, b"x", b"2")]
    expected.sort()
    assert records == expected


# --- checkpoint, manager and threads --------------------------------------------------

def _manager(root, **config) -> LogManager:
    defaults = compact_config(cleanup_policy="delete", **config)
    keyed = defaults.with_overrides({"cleanup.policy": "compact"})
    return LogManager([str(root)], defaults,
                      config_for=lambda topic: keyed if topic == "keyed" else defaults).open()


def test_the_cleaner_checkpoint_is_written_and_used(tmp_path):
    manager = _manager(tmp_path)
    log = manager.get_or_create_log("keyed", 0)
    plain = manager.get_or_create_log("plain", 0)
    for i in range(30):
        log.append(keyed([(b"k%d" % (i % 3), b"v%d" % i)]))
        plain.append(keyed([(b"k", b"v")]))
    log.roll()
    plain.roll()
    assert [key for key, _, _ in manager.cleanable_logs(T0)] == [("keyed", 0)]
    results = manager.clean_eligible(T0)
    assert results[("keyed", 0)].end_offset == 30
    path = tmp_path / filenames.CLEANER_OFFSET_CHECKPOINT
    assert checkpoints.read_offset_checkpoint(str(path)) == {("keyed", 0): 30}
    assert manager.cleanable_logs(T0) == []  # nothing dirty any more
    manager.close()

    manager = _manager(tmp_path)
    log = manager.get_or_create_log("keyed", 0)
    assert log.cleaner_checkpoint == 30
    log.append(keyed([(b"k0", b"new")]))
    log.roll()
    result = cleaner.clean_log(log, T0)
    assert result.first_dirty_offset == 30 and result.end_offset == 31
    assert read_records(log) == [(28, b"k1", b"v28"), (29, b"k2", b"v29"), (30, b"k0", b"new")]
    manager.close()


def test_cleaning_in_another_thread_loses_no_appends(tmp_path):
    log = open_log(tmp_path / "c-0", compact_config(segment_bytes=2000))
    stop = threading.Event()
    passes = []
    errors = []

    def clean_loop():
        try:
            while not stop.is_set():
                passes.append(cleaner.clean_log(log, T0))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=clean_loop)
    thread.start()
    model = {}
    try:
        for i in range(3000):
            key = b"k%d" % (i % 400)
            log.append(keyed([(key, b"v%d" % i)]))
            model[key] = (i, b"v%d" % i)
            if i % 100 == 0:
                log.tick()
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert sum(p.groups_swapped for p in passes) > 0
    cleaner.clean_log(log, T0)
    records = read_records(log)
    assert {k: (o, v) for o, k, v in records} == model
    active_base = log.active_segment.base_offset
    assert [r for r in records if r[0] >= active_base] \
        == [(o, b"k%d" % (o % 400), b"v%d" % o) for o in range(active_base, 3000)]
    log.close()
    reopened = open_log(log.directory)
    assert read_records(reopened) == records
    reopened.close()


def test_the_manager_runs_a_cleaner_thread(tmp_path):
    manager = _manager(tmp_path)
    log = manager.get_or_create_log("keyed", 0)
    for i in range(50):
        log.append(keyed([(b"k%d" % (i % 5), b"v%d" % i)]))
    log.roll()
    thread = manager.start_cleaner(backoff_ms=10)
    for _ in range(500):
        if log.cleaner_checkpoint == 50:
            break
        threading.Event().wait(0.01)
    manager.close()
    assert not thread.is_alive()
    assert checkpoints.read_offset_checkpoint(str(tmp_path / filenames.CLEANER_OFFSET_CHECKPOINT)) == {("keyed", 0): 50}


def test_the_batch_scan_accepts_cleaned_segments(tmp_path):
    log = _crash_fixture(tmp_path / "c-0")
    cleaner.clean_log(log, T0)
    for segment in log.segments:
        scan = scan_batches(segment.view())
        assert scan.crc_ok.all() and scan.valid_end == segment.size
    log.close()


def test_one_pass_at_a_time(tmp_path):
    log = _crash_fixture(tmp_path / "c-0")
    with log.cleaning() as acquired:
        assert acquired
        with log.cleaning() as again:
            assert not again
        assert cleaner.clean_log(log, T0).aborted == "busy"
    result = cleaner.clean_log(log, T0)
    assert not result.aborted and result.groups_swapped
    log.close()


def _facts(**overrides) -> BatchFacts:
    values: dict[str, Any] = dict(magic=2, is_control=False, has_delete_horizon=False, base_timestamp=T0,
                                  record_count=3, producer_id=-1, kept=3, kept_tombstones=0)
    values.update(overrides)
    return BatchFacts(**values)


@pytest.mark.parametrize("facts, keep_empty, expected", [
    (_facts(magic=1, kept=0), False, Verdict.COPY),
    (_facts(), False, Verdict.COPY),
    (_facts(kept_tombstones=1), False, Verdict.HORIZON),
    (_facts(kept_tombstones=1, has_delete_horizon=True), False, Verdict.COPY),
    (_facts(kept=2), False, Verdict.FILTER),
    (_facts(kept=2, kept_tombstones=1), False, Verdict.HORIZON),
    (_facts(kept=0), False, Verdict.DROP),
    (_facts(kept=0), True, Verdict.EMPTY),
    (_facts(kept=0, producer_id=4), False, Verdict.EMPTY),
    (_facts(is_control=True, kept=0), False, Verdict.HORIZON),
    (_facts(is_control=True, kept=0, has_delete_horizon=True, base_timestamp=T0 + 1), False, Verdict.COPY),
    (_facts(is_control=True, kept=0, has_delete_horizon=True), False, Verdict.DROP),
    (_facts(is_control=True, kept=0, has_delete_horizon=True), True, Verdict.EMPTY),
])
def test_batch_verdicts(facts, keep_empty, expected):
    assert verdict(facts, T0, keep_empty) is expected


def test_a_kafka_emptied_transactional_header_loses_its_bit_and_its_marker_is_dropped_safely(tmp_path):
    """Kafka's cleaner leaves an emptied data batch's header with its
    transactional bit (writeEmptyHeader).  hpbroker's, meeting such a header
    in a directory Kafka cleaned, strips the bit (the header holds no record
    of the transaction) before dropping the marker: a replay from the log
    start must never find that transaction open."""
    from hpbroker.kernels import layout
    from hpbroker.records import encode_control_batch
    from hpbroker.storage import batch_filter
    from hpbroker.storage.log import ORIGIN_COORDINATOR

    config = compact_config(delete_retention_ms=1000)
    log = open_log(tmp_path / "c-0", config)
    log.append(keyed([(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True))
    log.append(encode_control_batch(1, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=T0),
               origin=ORIGIN_COORDINATOR)
    log.append(keyed([(b"b", b"2")]))
    log.append(keyed([(b"a", b"3")]))  # supersedes the transaction's only record
    log.roll()
    kafka_keeps = layout.TIMESTAMP_TYPE_BIT | layout.TRANSACTIONAL_BIT
    original, batch_filter._EMPTY_DATA_KEEPS = batch_filter._EMPTY_DATA_KEEPS, kafka_keeps
    try:
        cleaner.clean_log(log, T0)  # as Kafka's cleaner would have left it
    finally:
        batch_filter._EMPTY_DATA_KEEPS = original
    assert read_batches(log)[0].header.is_transactional and not read_batches(log)[0].records
    cleaner.clean_log(log, T0 + 2000)
    batches = read_batches(log)
    assert not batches[0].header.is_transactional and not [b for b in batches if b.header.is_control]
    log.close()
    for snapshot in (tmp_path / "c-0").glob("*.snapshot"):
        snapshot.unlink()  # a replica rebuilt from the log start
    again = open_log(tmp_path / "c-0", config)
    assert again.last_stable_offset == again.high_watermark
    again.close()
