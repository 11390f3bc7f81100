"""Idempotent-producer state: Kafka's duplicate / sequence / epoch rules, the
``.snapshot`` format byte for byte, and replay from real batches."""

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hpbroker.kernels import scan_batches
from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.storage import filenames, producer_state as ps
from hpbroker.storage.producer_state import ProducerStateManager, Verdict

INT32_MAX = (1 << 31) - 1
PID = 1000
T0 = 1_700_000_000_000

tmp_settings = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def crc32c_twin(data: bytes) -> int:
    """Bitwise CRC-32C, independent of the kernel."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def test_crc_twin_known_answer():
    assert crc32c_twin(b"123456789") == 0xE3069283


class Producer:
    """Appends batches of one producer through check/update, assigning offsets
    the way a log does."""

    def __init__(self, psm, pid=PID, epoch=0):
        self.psm, self.pid, self.epoch, self.seq = psm, pid, epoch, 0
        self.sent = []  # (base_seq, count, first_offset, last_offset, timestamp)

    def send(self, count, offset, timestamp=T0):
        result = self.psm.check(self.pid, self.epoch, self.seq, count)
        assert result.verdict is Verdict.OK, result
        last_seq = ps.increment_sequence(self.seq, count - 1)
        self.psm.update(self.pid, self.epoch, self.seq, last_seq, offset, offset + count - 1, timestamp)
        self.sent.append((self.seq, count, offset, offset + count - 1, timestamp))
        self.seq = ps.increment_sequence(last_seq, 1)
        return offset + count


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(str(tmp_path))


# --- check: duplicates, gaps, epochs ----------------------------------------------------

@tmp_settings
@given(counts=st.lists(st.integers(1, 20), min_size=6, max_size=12), start=st.integers(0, 1000))
def test_duplicates_of_last_five_batches_get_original_offsets(tmp_path, counts, start):
    psm = ProducerStateManager(str(tmp_path))
    p = Producer(psm)
    offset = start
    for i, count in enumerate(counts):
        offset = p.send(count, offset, timestamp=T0 + i)
    for seq, count, first, last, ts in p.sent[-5:]:
        result = psm.check(PID, 0, seq, count)
        assert result.verdict is Verdict.DUPLICATE
        assert (result.first_offset, result.last_offset, result.log_append_time) == (first, last, ts)
        assert result.error_code == 0
    # The 6th-newest is forgotten: a retry of it is simply out of order.
    seq, count, *_ = p.sent[-6]
    result = psm.check(PID, 0, seq, count)
    assert result.verdict is Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert result.error_code == 45


def test_duplicate_needs_exact_sequence_range(psm):
    p = Producer(psm)
    p.send(10, 0)
    assert psm.check(PID, 0, 0, 10).verdict is Verdict.DUPLICATE
    assert psm.check(PID, 0, 0, 9).verdict is Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert psm.check(PID, 0, 0, 11).verdict is Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER


@given(gap=st.integers(1, 1000), behind=st.integers(1, 5))
def test_gap_or_going_back_is_out_of_order(gap, behind):
    psm = ProducerStateManager("/nonexistent")
    p = Producer(psm)
    for i in range(3):
        p.send(5, i * 5)
    assert p.seq == 15
    assert psm.check(PID, 0, 15, 1).verdict is Verdict.OK
    assert psm.check(PID, 0, 15 + gap, 1).error_code == 45
    assert psm.check(PID, 0, 15 - behind, 1).error_code == 45  # not a whole retained batch


def test_lower_epoch_is_fenced(psm):
    p = Producer(psm, epoch=5)
    p.send(3, 0)
    for seq in (0, 3, 7):
        result = psm.check(PID, 4, seq, 1)
        assert result.verdict is Verdict.INVALID_PRODUCER_EPOCH
        assert result.error_code == 47
    # even an exact copy of an appended batch, sent with an older epoch
    assert psm.check(PID, 4, 0, 3).error_code == 47


def test_epoch_bump_must_restart_at_zero(psm):
    p = Producer(psm, epoch=1)
    p.send(4, 0)
    assert psm.check(PID, 2, 4, 1).error_code == 45
    assert psm.check(PID, 2, 0, 1).verdict is Verdict.OK
    psm.update(PID, 2, 0, 0, 4, 4, T0)
    entry = psm.entry(PID)
    assert entry.producer_epoch == 2
    assert len(entry.batches) == 1  # the old epoch's batches can no longer match
    assert psm.check(PID, 1, 0, 4).error_code == 47
    assert psm.check(PID, 2, 1, 1).verdict is Verdict.OK


@given(seq=st.integers(0, INT32_MAX), count=st.integers(1, 10))
def test_unknown_producer_accepts_any_sequence(seq, count):
    # KIP-360: no UNKNOWN_PRODUCER_ID for a producer without state.
    psm = ProducerStateManager("/nonexistent")
    assert psm.check(77, 3, seq, count).verdict is Verdict.OK


def test_non_idempotent_is_never_checked_or_tracked(psm):
    assert psm.check(-1, -1, -1, 5).verdict is Verdict.OK
    psm.update(-1, -1, -1, -1, 0, 4, T0)
    assert len(psm) == 0
    assert psm.end_offset == 5


def test_sequence_wraps_at_int32_max(psm):
    psm.update(PID, 0, INT32_MAX - 2, INT32_MAX, 0, 2, T0)
    assert psm.check(PID, 0, 0, 1).verdict is Verdict.OK  # 0 follows MAX
    assert psm.check(PID, 0, 1, 1).error_code == 45
    # a batch straddling the wrap: sequences MAX-1, MAX, 0, 1
    psm2 = ProducerStateManager(psm.partition_dir)
    psm2.update(PID, 0, 0, INT32_MAX - 2, 0, INT32_MAX - 2, T0)
    assert psm2.check(PID, 0, INT32_MAX - 1, 4).verdict is Verdict.OK
    psm2.update(PID, 0, INT32_MAX - 1, ps.increment_sequence(INT32_MAX - 1, 3), 100, 103, T0)
    entry = psm2.entry(PID)
    assert entry is not None and entry.last_seq == 1
    dup = psm2.check(PID, 0, INT32_MAX - 1, 4)
    assert (dup.verdict, dup.first_offset, dup.last_offset) == (Verdict.DUPLICATE, 100, 103)
    assert psm2.check(PID, 0, 2, 1).verdict is Verdict.OK


def test_check_batches_sees_earlier_batches_of_the_request(psm):
    p = Producer(psm)
    p.send(2, 0)
    request = encode_batch([Record(i, T0, None, b"v") for i in range(3)], producer_id=PID, producer_epoch=0,
                           base_sequence=2)
    request += encode_batch([Record(i, T0, None, b"v") for i in range(2)], producer_id=PID, producer_epoch=0,
                            base_sequence=5)
    scan = scan_batches(np.frombuffer(request, np.uint8))
    assert psm.check_batches(scan).verdict is Verdict.OK
    assert psm.check(PID, 0, 5, 2).error_code == 45  # checked one by one, the second has a gap
    psm.update_batches(scan, [2, 5], [4, 6], [T0, T0])
    assert psm.entry(PID).last_seq == 6
    dup = psm.check_batches(scan)
    assert (dup.verdict, dup.first_offset, dup.last_offset) == (Verdict.DUPLICATE, 2, 4)
    assert psm.end_offset == 7


# --- snapshot format -------------------------------------------------------------------

def test_snapshot_header_and_entry_sizes_are_pinned():
    assert ps.HEADER_SIZE == ps.ENTRIES_OFFSET == 10
    assert (ps.VERSION_OFFSET, ps.CRC_OFFSET, ps.COUNT_OFFSET) == (0, 2, 6)
    assert ps.ENTRY_SIZE == 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8 == 46


def test_snapshot_bytes_match_kafka_layout(psm, tmp_path):
    psm.update(7, 3, 10, 14, 100, 104, T0 + 1)
    psm.update(7, 3, 15, 15, 105, 105, T0 + 2)
    psm.update(2, 0, 0, 0, 106, 106, T0 + 3, transactional=True)
    path = psm.take_snapshot(107)
    assert os.path.basename(path) == "00000000000000000107.snapshot"
    assert os.listdir(tmp_path) == ["00000000000000000107.snapshot"]  # no .tmp left behind
    data = open(path, "rb").read()
    body = struct.pack(">i", 2)
    # producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, currentTxnFirstOffset
    body += struct.pack(">qhiqiqiq", 2, 0, 0, 106, 0, T0 + 3, -1, 106)
    body += struct.pack(">qhiqiqiq", 7, 3, 15, 105, 0, T0 + 2, -1, -1)
    assert data == struct.pack(">hI", 1, crc32c_twin(body)) + body
    assert len(data) == 10 + 2 * 46


def test_empty_snapshot_is_header_only(psm):
    data = open(psm.take_snapshot(0), "rb").read()
    assert data == struct.pack(">hIi", 1, crc32c_twin(b"\0\0\0\0"), 0)


@given(entries=st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 32767), st.integers(0, INT32_MAX), st.integers(0, 2**40),
              st.integers(0, 1000), st.integers(-1, 2**45), st.integers(-1, 1000), st.integers(-1, 2**40)),
    max_size=20, unique_by=lambda e: e[0]))
def test_snapshot_round_trip(entries):
    objs = []
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in entries:
        e = ps.ProducerStateEntry(pid, epoch, coord, ts, txn)
        e.batches.append(ps.BatchMetadata(ps.decrement_sequence(last_seq, delta), last_seq,
                                          last_offset - delta, last_offset, ts))
        objs.append(e)
    data = ps.encode_snapshot(objs)
    assert data == ps.encode_snapshot(ps.decode_snapshot(data))
    back = {e.producer_id: e for e in ps.decode_snapshot(data)}
    for e in objs:
        got = back[e.producer_id]
        assert (got.producer_epoch, got.coordinator_epoch, got.last_timestamp, got.current_txn_first_offset) == \
            (e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset)
        assert list(got.batches) == list(e.batches)


def test_snapshot_keeps_only_the_last_batch(psm):
    p = Producer(psm)
    for i in range(4):
        p.send(3, i * 3)
    psm.take_snapshot()
    fresh = ProducerStateManager(psm.partition_dir)
    assert fresh.load_latest_snapshot(12) == 12
    assert fresh.check(PID, 0, 9, 3).verdict is Verdict.DUPLICATE  # the last batch
    assert fresh.check(PID, 0, 6, 3).error_code == 45  # older ones, as in Kafka
    assert fresh.check(PID, 0, 12, 1).verdict is Verdict.OK


def test_entry_without_batch_round_trips(psm):
    psm.end_txn(9, 4, 17, T0, 50)  # a marker only: epoch known, no batch
    psm.take_snapshot()
    fresh = ProducerStateManager(psm.partition_dir)
    fresh.load_latest_snapshot(1000)
    e = fresh.entry(9)
    assert e is not None
    assert (e.producer_epoch, e.coordinator_epoch, e.last_seq, len(e.batches)) == (4, 17, -1, 0)
    assert fresh.check(9, 4, 0, 1).verdict is Verdict.OK
    assert fresh.check(9, 4, 1, 1).error_code == 45


@pytest.mark.parametrize("damage", ["crc", "short", "empty", "version", "trailing", "count"])
def test_corrupt_snapshot_falls_back_to_older(psm, tmp_path, damage):
    p = Producer(psm)
    p.send(5, 0)
    psm.take_snapshot()  # at 5
    p.send(5, 5)
    newest = psm.take_snapshot()  # at 10
    data = bytearray(open(newest, "rb").read())
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "short":
        data = data[:-3]
    elif damage == "empty":
        data = b""
    elif damage == "version":
        data[1] = 2
    elif damage == "trailing":
        data += b"\0"
    elif damage == "count":
        data[6:10] = struct.pack(">i", -1)
    open(newest, "wb").write(data)
    fresh = ProducerStateManager(str(tmp_path))
    assert fresh.load_latest_snapshot(10) == 5
    entry = fresh.entry(PID)
    assert entry is not None and entry.last_seq == 4
    assert fresh.list_snapshots() == [5]  # the corrupt one was deleted


def test_no_usable_snapshot_means_full_replay(psm, tmp_path):
    Producer(psm).send(5, 0)
    path = psm.take_snapshot()
    open(path, "r+b").write(b"\xff\xff")
    fresh = ProducerStateManager(str(tmp_path))
    assert fresh.load_latest_snapshot(100, log_start_offset=0) == 0
    assert len(fresh) == 0 and fresh.end_offset == 0
    assert ProducerStateManager(str(tmp_path / "missing")).load_latest_snapshot(5, 3) == 3


def test_snapshots_outside_the_log_are_dropped(psm):
    p = Producer(psm)
    for i in range(4):
        p.send(5, i * 5)
        psm.take_snapshot()  # 5, 10, 15, 20
    assert psm.list_snapshots() == [5, 10, 15, 20]
    fresh = ProducerStateManager(psm.partition_dir)
    assert fresh.load_latest_snapshot(17, log_start_offset=10) == 15
    assert fresh.list_snapshots() == [10, 15]


def test_delete_snapshots_below_keeps_newest(psm):
    for offset in (0, 10, 20, 30):
        psm.take_snapshot(offset)
    assert psm.delete_snapshots_below(25, keep_newest=2) == [0, 10]
    assert psm.list_snapshots() == [20, 30]
    assert psm.delete_snapshots_below(31, keep_newest=2) == []
    assert psm.delete_snapshots_below(25) == [20]
    assert psm.snapshot_at_or_below(29) is None and psm.snapshot_at_or_below(30) == 30


def test_stray_names_are_not_snapshots(psm, tmp_path):
    psm.take_snapshot(3)
    for name in ("junk.snapshot", "00000000000000000009.snapshot.deleted", "00000000000000000009.log"):
        (tmp_path / name).write_bytes(b"x")
    assert psm.list_snapshots() == [3]


# --- replay, truncation, expiry --------------------------------------------------------

def _build_log(ops):
    """Encode a log from ops (pid, epoch_bump, count, transactional, commit) the
    way a broker would have accepted them; returns (bytes, incrementally built
    state as (producers, end_offset))."""
    live = ProducerStateManager("/nonexistent")
    seqs, epochs, chunks, offset = {}, {}, [], 0
    for i, (pid, bump, count, txn, commit) in enumerate(ops):
        ts = T0 + i
        if pid < 0:
            chunks.append(encode_batch([Record(offset + k, ts, None, b"v") for k in range(count)], base_offset=offset))
            live.update(-1, -1, -1, -1, offset, offset + count - 1, ts)
            offset += count
            continue
        if bump:
            epochs[pid] = epochs.get(pid, 0) + 1
            seqs[pid] = 0
        epoch, seq = epochs.setdefault(pid, 0), seqs.setdefault(pid, 0)
        verdict = live.check(pid, epoch, seq, count, transactional=txn).verdict
        if verdict is Verdict.INVALID_TXN_STATE:
            continue  # a plain batch inside the producer's open transaction: the broker refuses it
        assert verdict is Verdict.OK
        records = [Record(offset + k, ts, None, b"v") for k in range(count)]
        chunks.append(encode_batch(records, base_offset=offset, producer_id=pid, producer_epoch=epoch,
                                   base_sequence=seq, transactional=txn))
        last_seq = ps.increment_sequence(seq, count - 1)
        live.update(pid, epoch, seq, last_seq, offset, offset + count - 1, ts, transactional=txn)
        seqs[pid] = ps.increment_sequence(last_seq, 1)
        offset += count
        if txn and commit:
            chunks.append(encode_control_batch(1, producer_id=pid, producer_epoch=epoch, coordinator_epoch=0,
                                               base_offset=offset, timestamp=ts))
            live.end_txn(pid, epoch, None, ts, offset)
            offset += 1
    return b"".join(chunks), live


def _state(psm):
    return {pid: (e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset, list(e.batches))
            for pid, e in psm.producers.items()}


OPS = st.lists(st.tuples(st.sampled_from([-1, 1, 2, 3]), st.booleans(), st.integers(1, 6),
                         st.booleans(), st.booleans()), min_size=1, max_size=40)


@tmp_settings
@given(ops=OPS)
def test_replay_from_batches_equals_incremental_state(tmp_path, ops):
    data, live = _build_log(ops)
    scan = scan_batches(np.frombuffer(data, np.uint8))
    replayed = ProducerStateManager(str(tmp_path))
    replayed.load_from_batches(scan)
    assert _state(replayed) == _state(live)
    assert replayed.end_offset == live.end_offset


@tmp_settings
@given(ops=OPS, cut=st.integers(0, 40))
def test_snapshot_then_replay_of_the_rest(tmp_path, ops, cut):
    """Snapshot at a batch boundary, reload, replay the tail: the final snapshot
    matches the one taken after a full replay (snapshots hold the last batch only)."""
    for f in os.listdir(tmp_path):
        os.unlink(tmp_path / f)
    data, live = _build_log(ops)
    scan = scan_batches(np.frombuffer(data, np.uint8))
    cut = min(cut, len(scan.position))
    boundary = int(scan.base_offset[cut]) if cut < len(scan.position) else live.end_offset
    first = ProducerStateManager(str(tmp_path))
    first.load_from_batches([scan], from_offset=0)
    full_snapshot = ps.encode_snapshot(first.producers.values())
    head = ProducerStateManager(str(tmp_path))
    head.load_from_batches(scan_batches(np.frombuffer(data, np.uint8), 0,
                                        int(scan.position[cut]) if cut < len(scan.position) else len(data)))
    head.take_snapshot(boundary)
    again = ProducerStateManager(str(tmp_path))
    start = again.load_latest_snapshot(live.end_offset)
    assert start == boundary
    again.load_from_batches(scan, from_offset=start)
    assert ps.encode_snapshot(again.producers.values()) == full_snapshot
    assert again.end_offset == live.end_offset


def test_truncate_reloads_nearest_snapshot(psm):
    p = Producer(psm)
    offset = 0
    for i in range(6):
        offset = p.send(2, offset, timestamp=T0 + i)
        if i % 2 == 1:
            psm.take_snapshot()  # at 4, 8, 12
    assert psm.list_snapshots() == [4, 8, 12]
    assert psm.truncate_to(10) == 8
    assert psm.list_snapshots() == [4, 8]
    assert psm.entry(PID).last_seq == 7 and psm.end_offset == 8
    # the log replays [8, 10) — here the batch at offset 8
    psm.update(PID, 0, 8, 9, 8, 9, T0)
    assert psm.truncate_to(10) == 10  # already there: nothing to do
    assert psm.check(PID, 0, 10, 1).verdict is Verdict.OK


def test_truncate_fully_drops_everything(psm):
    Producer(psm).send(3, 0)
    psm.take_snapshot()
    psm.truncate_fully(50)
    assert len(psm) == 0 and psm.end_offset == 50 and psm.list_snapshots() == []


def test_expiry(psm):
    day = ps.DEFAULT_PRODUCER_ID_EXPIRATION_MS
    psm.update(1, 0, 0, 0, 0, 0, T0)
    psm.update(2, 0, 0, 0, 1, 1, T0 + 1000)
    psm.update(3, 0, 0, 0, 2, 2, T0, transactional=True)  # open transaction: kept
    assert psm.remove_expired(T0 + day - 1) == []
    assert psm.remove_expired(T0 + day) == [1]
    assert sorted(psm.producers) == [2, 3]
    psm.take_snapshot()
    fresh = ProducerStateManager(psm.partition_dir)
    fresh.load_latest_snapshot(100, now_ms=T0 + day + 1000)
    assert sorted(fresh.producers) == [3]
    # an expired producer is unknown again: any sequence is accepted
    assert psm.check(1, 0, 42, 1).verdict is Verdict.OK


def test_custom_expiration(tmp_path):
    psm = ProducerStateManager(str(tmp_path), producer_id_expiration_ms=10)
    psm.update(1, 0, 0, 0, 0, 0, 100)
    assert psm.remove_expired(109) == [] and psm.remove_expired(110) == [1]


def test_snapshot_name_comes_from_filenames(psm):
    assert psm.snapshot_path(5) == filenames.segment_file(psm.partition_dir, 5, filenames.SNAPSHOT_SUFFIX)
