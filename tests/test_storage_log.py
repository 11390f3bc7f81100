"""The partition log: append, roll, read, timestamps, retention, flush policy."""

import contextlib
import os
import resource
import signal
import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings, strategies as st

from hpbroker.errors import ErrorCode
from hpbroker.kernels import layout
from hpbroker.records import CorruptRecordError, decode_batch
from hpbroker.storage import (
    CorruptBatchError,
    InvalidRecordError,
    KafkaStorageError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedFormatError,
    filenames,
)
from hpbroker.storage.segment import RECENT_BATCHES
from tests.log_helpers import batches_in, make_batch, read_all

T0 = 1_700_000_000_000


def open_log(tmp_path, **config):
    return Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(**config))


def test_offsets_are_assigned_contiguously_and_base_offsets_rewritten(tmp_path):
    log = open_log(tmp_path)
    infos = [log.append(make_batch(n, tag=f"b{n}")) for n in (1, 5, 3)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 0), (1, 5), (6, 8)]
    assert log.log_end_offset == log.written_offset == 9
    records = read_all(log)
    assert [r.offset for r in records] == list(range(9))
    assert records[1].key == b"b50" and records[8].key == b"b32"


def test_several_batches_in_one_append(tmp_path):
    log = open_log(tmp_path)
    info = log.append(make_batch(2) + make_batch(3, codec=layout.CODEC_ZSTD))
    assert (info.first_offset, info.last_offset, info.batches, info.records) == (0, 4, 2, 5)
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]


def test_leader_epoch_is_stamped_and_crc_still_valid(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(2), leader_epoch=7)
    data = log.read_records(0)
    assert struct.unpack_from(">i", data, layout.PARTITION_LEADER_EPOCH)[0] == 7
    decode_batch(data)  # verifies the CRC
    assert log.leader_epochs == [(7, 0)]


def test_log_append_time_rewrites_max_timestamp_and_crc(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append(make_batch(3, timestamp=5), timestamp_ms=T0)
    assert info.log_append_time == T0
    batch = decode_batch(log.read_records(0))
    assert batch.header.max_timestamp == T0 and batch.header.timestamp_type == 1
    assert all(r.timestamp == T0 for r in batch.records)


def test_bad_input_is_rejected_and_nothing_is_appended(tmp_path):
    log = open_log(tmp_path, max_message_bytes=2000)
    log.append(make_batch(1))
    good = bytearray(make_batch(2))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        log.append(bytes(good) + bytes(corrupt))
    with pytest.raises(CorruptBatchError):
        log.append(bytes(good[:-3]))
    with pytest.raises(RecordTooLargeError) as too_large:
        log.append(make_batch(5, value_size=1000))
    assert too_large.value.error_code == ErrorCode.message_too_large
    small_segments = open_log(tmp_path / "small", segment_bytes=len(make_batch(2)))
    with pytest.raises(RecordBatchTooLargeError) as too_large_for_a_segment:  # Kafka: RECORD_LIST_TOO_LARGE
        small_segments.append(make_batch(3))
    assert too_large_for_a_segment.value.error_code == ErrorCode.record_list_too_large
    assert small_segments.log_end_offset == 0
    legacy = bytearray(good)
    legacy[layout.MAGIC] = 1
    with pytest.raises((CorruptBatchError, UnsupportedFormatError)):
        log.append(bytes(legacy))
    lying = bytearray(good)
    struct.pack_into(">i", lying, layout.RECORD_COUNT, 9)  # inside the CRC, so re-sign it
    struct.pack_into(">I", lying, layout.CRC, crc32c(bytes(lying[layout.CRC_START :])))
    with pytest.raises(InvalidRecordError):
        log.append(bytes(lying))
    assert log.log_end_offset == 1 and os.path.getsize(log.active_segment.log_path) == len(make_batch(1))


def test_roll_by_size_names_segments_by_base_offset(tmp_path):
    batch = make_batch(10)
    log = open_log(tmp_path, segment_bytes=len(batch) * 3)
    for _ in range(7):
        log.append(batch)
    assert [s.base_offset for s in log.segments] == [0, 30, 60]
    names = sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))
    assert names == [f"{b:020d}.log" for b in (0, 30, 60)]
    assert [r.offset for r in read_all(log)] == list(range(70))


def test_roll_by_time_uses_the_first_batch_timestamp(tmp_path):
    log = open_log(tmp_path, segment_ms=1000)
    log.append(make_batch(1, timestamp=T0))
    log.append(make_batch(1, timestamp=T0 + 1000))
    assert len(log.segments) == 1
    log.append(make_batch(1, timestamp=T0 + 1001))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_read_returns_whole_batches_within_max_bytes_but_at_least_one(tmp_path):
    log = open_log(tmp_path)
    sizes = []
    for n in range(1, 8):
        sizes.append(len(make_batch(n)))
        log.append(make_batch(n))
    # max_bytes that ends in the middle of the third batch: two whole batches.
    found = log.read(0, sizes[0] + sizes[1] + 5)
    assert found is not None
    assert found.size == sizes[0] + sizes[1]
    assert [b.header.base_offset for b in batches_in(found.tobytes())] == [0, 1]
    # smaller than the first batch: that batch alone, as Kafka does
    alone = log.read(1, 1)
    assert alone is not None and alone.size == sizes[1]
    assert log.read(1, 1, min_one=False) is None
    # an offset inside a batch returns the batch that holds it
    inside = log.read(4, 1)
    assert inside is not None
    assert batches_in(inside.tobytes())[0].header.base_offset == 3
    # max_offset keeps batches that start at or above it out
    found = log.read(0, 1 << 20, max_offset=3)
    assert found is not None
    assert [b.header.base_offset for b in batches_in(found.tobytes())] == [0, 1]


def test_read_out_of_range_and_at_the_end(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(3))
    assert log.read(3, 100) is None
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(4, 100)
    assert err.value.error_code == 1
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert [r.offset for r in read_all(log)] == [2]


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    for i in range(20):
        log.append(make_batch(3, timestamp=T0 + 100 * i, step_ms=10))
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 15) == (2, T0 + 20)
    assert log.offset_for_timestamp(T0 + 100 * 7 + 11) == (23, T0 + 720)
    assert log.offset_for_timestamp(T0 + 100 * 19 + 20) == (59, T0 + 1920)
    assert log.offset_for_timestamp(T0 + 100 * 19 + 21) is None
    assert log.offset_of_max_timestamp() == (59, T0 + 1920)


def test_offset_for_timestamp_after_the_log_start_passed_a_time_index_entry(tmp_path):
    # Timestamps go down then up; the log start moves past the batch the time
    # index remembers, so that entry must not bound the search (found by the model test).
    log = open_log(tmp_path, index_interval_bytes=0)
    log.append(make_batch(4, timestamp=T0, step_ms=0))
    log.append(make_batch(5, timestamp=T0 + 40, step_ms=13))
    log.delete_records_before(9)
    log.append(make_batch(1, timestamp=T0 + 90))
    log.append(make_batch(1, timestamp=T0 + 100))
    assert log.offset_for_timestamp(T0 + 91) == (10, T0 + 100)


def test_time_index_keeps_the_largest_timestamp_of_a_rolled_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(6):
        log.append(make_batch(2, timestamp=T0 + i))
    first = log.segments[0]
    assert first.time_index.max_timestamp() == first.max_timestamp


def test_retention_by_time_and_size_never_deletes_the_active_segment(tmp_path):
    batch_size = len(make_batch(2))
    log = open_log(tmp_path, segment_bytes=batch_size * 2, retention_ms=1000, file_delete_delay_ms=0)
    for i in range(6):
        log.append(make_batch(2, timestamp=T0 + i * 1000))
    assert len(log.segments) == 3
    assert log.delete_old_segments(now=T0 + 3500) == 1  # segment 0 ends at T0+1001
    assert log.log_start_offset == 4
    assert log.delete_old_segments(now=T0 + 10**9) == 1  # everything old, but the active one stays
    assert [s.base_offset for s in log.segments] == [8]
    log.tick()
    assert not [n for n in os.listdir(log.directory) if n.endswith(filenames.DELETED_SUFFIX)]

    sized = open_log(tmp_path / "sized", segment_bytes=batch_size * 2, retention_bytes=batch_size * 3, retention_ms=-1)
    for i in range(8):
        sized.append(make_batch(2, timestamp=T0))
    assert sized.delete_old_segments(now=T0) == 2
    assert sized.size_in_bytes() <= batch_size * 4 and sized.log_start_offset == 8


def test_flush_policy_by_messages_and_by_time(tmp_path):
    log = open_log(tmp_path, flush_messages=5)
    log.append(make_batch(3))
    assert log.flushed_offset == 0
    log.append(make_batch(3))
    assert log.flushed_offset == 6
    timed = open_log(tmp_path / "t", flush_ms=1000)
    timed.append(make_batch(2))
    timed.tick(now=timed._last_flush_ms + 999)
    assert timed.flushed_offset == 0
    timed.tick(now=timed._last_flush_ms + 1000)
    assert timed.flushed_offset == 2


def test_a_roll_asks_the_next_tick_to_flush_the_old_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=len(make_batch(2)))
    log.append(make_batch(2))
    log.append(make_batch(2))
    assert len(log.segments) == 2 and log.flushed_offset == 0
    log.tick()
    assert log.flushed_offset == 2


def test_staged_appends_are_invisible_until_written(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(2))
    log.append(make_batch(2), write=False)
    assert (log.written_offset, log.log_end_offset) == (2, 4)
    assert log.read(2, 100) is None
    log.write()
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3]


def test_reopen_after_close_keeps_everything(tmp_path):
    log = open_log(tmp_path, segment_bytes=500, index_interval_bytes=64)
    for i in range(30):
        log.append(make_batch(2, timestamp=T0 + i))
    before = read_all(log)
    log.flush()  # index entries reach the files at a flush or a close
    index_bytes = open(log.segments[0].offset_index.path, "rb").read()
    log.close()
    again = Log.open(log.directory, "events", 0, log.config, recovery_point=60, clean_shutdown=True)
    assert again.log_end_offset == 60 and read_all(again) == before
    assert open(again.segments[0].offset_index.path, "rb").read() == index_bytes
    info = again.append(make_batch(1))
    assert info.first_offset == 60


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Make the kernel refuse writes past ``limit`` bytes (EFBIG), as a full disk refuses them."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_a_failed_write_rolls_back_and_loses_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(3))
    size = log.active_segment.size
    with file_size_limit(size + 10):  # room for 10 bytes of the next batch only
        with pytest.raises(KafkaStorageError) as err:
            log.append(make_batch(2))
    assert err.value.error_code == 56
    assert log.log_end_offset == 3 and os.path.getsize(log.active_segment.log_path) == size
    assert log.append(make_batch(1)).first_offset == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3]


@pytest.mark.parametrize("how", ["produce", "follower"])
def test_a_new_leader_epoch_that_cannot_be_saved_appends_nothing_and_the_retry_lands_once(tmp_path, how):
    """The leader-epoch checkpoint is written before the batches that start a new
    epoch; when the disk refuses it, those batches are not left staged, where
    the next append's write would put them in the file a second time."""
    log = open_log(tmp_path / "log")
    log.append(make_batch(3), leader_epoch=0)
    if how == "produce":
        def append():
            return log.append(make_batch(2), leader_epoch=1).first_offset
    else:  # two batches of the new epoch, as a follower fetches them from its leader
        leader = open_log(tmp_path / "leader")
        leader.append(make_batch(3), leader_epoch=0)
        leader.append(make_batch(1), leader_epoch=1)
        leader.append(make_batch(1), leader_epoch=1)
        fetched = leader.read_records(3)

        def append():
            return log.append_as_follower(bytearray(fetched)) - 2
    size = log.active_segment.size
    with file_size_limit(10):  # the checkpoint cannot be written (nor anything else)
        with pytest.raises(KafkaStorageError, match="leader epochs"):
            append()
    assert log.log_end_offset == 3 and log.leader_epochs == [(0, 0)]
    assert os.path.getsize(log.active_segment.log_path) == size
    assert append() == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]
    assert log.leader_epochs == [(0, 0), (1, 3)]


def test_corrupt_record_error_is_a_value_error():
    assert issubclass(CorruptRecordError, ValueError)


def test_background_checkpoints_are_all_written_by_close(tmp_path):
    from hpbroker.storage import LogManager, checkpoints as ckpt

    logs = LogManager([str(tmp_path)], LogConfig(), background_io=True).open()
    partition_log = logs.get_or_create_log("events", 0)
    partition_log.append(make_batch(3))
    logs.write_checkpoints()  # queued to the writer thread
    partition_log.append(make_batch(2))
    logs.close()  # waits for the queue, then writes the final rows itself
    assert ckpt.read_offset_checkpoint(str(tmp_path / "replication-offset-checkpoint")) == {("events", 0): 5}
    assert ckpt.read_offset_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint")) == {("events", 0): 5}


@pytest.mark.parametrize("requested,expected", [
    (0, (0, 2)),     # epoch 0 ended where epoch 2 began
    (1, (0, 2)),     # unknown epoch between two known: the floor, and the start of the next
    (2, (2, 5)),     # the latest epoch ends at the log end
    (3, (-1, -1)),   # newer than any known
    (-1, (-1, -1)),  # undefined
])
def test_end_offset_for_epoch_follows_kafkas_leader_epoch_cache(tmp_path, requested, expected):
    log = open_log(tmp_path)
    log.append(make_batch(2), leader_epoch=0)
    log.append(make_batch(3), leader_epoch=2)
    assert log.end_offset_for_epoch(requested, current_epoch=2) == expected


def test_a_leader_holds_its_epoch_from_the_log_end_before_appending(tmp_path):
    log = open_log(tmp_path)
    assert log.end_offset_for_epoch(0, current_epoch=0) == (0, 0)
    log.append(make_batch(4), leader_epoch=0)
    assert log.end_offset_for_epoch(1, current_epoch=1) == (1, 4)
    assert log.end_offset_for_epoch(0, current_epoch=1) == (0, 4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([10, 10, 300]), st.sampled_from([0, 0, 5, -5])),
                        min_size=1, max_size=20),
       interval_batches=st.integers(0, 3), extra=st.sampled_from([0, 0, -1, 1]))
def test_one_batch_appends_index_as_one_append_of_them_all(tmp_path_factory, batches, interval_batches, extra):
    """A produce request's usual single batch is indexed by a scalar path; a
    request of many by the kernel: the .index, .timeindex and tail state agree
    (equal sizes and timestamps come up often, to try the rule's edges)."""
    data = [make_batch(n, timestamp=T0 + shift, value_size=size, tag=f"b{i % 10}")
            for i, (n, size, shift) in enumerate(batches)]
    config = LogConfig(index_interval_bytes=max(interval_batches * len(data[0]) + extra, 0))
    one_by_one = Log.open(str(tmp_path_factory.mktemp("single") / "t-0"), "t", 0, config)
    together = Log.open(str(tmp_path_factory.mktemp("all") / "t-0"), "t", 0, config)
    for batch in data:
        one_by_one.append(batch)
    together.append(b"".join(data))
    a, b = one_by_one.active_segment, together.active_segment
    assert a.offset_index.keys().tolist() == b.offset_index.keys().tolist()
    assert a.offset_index.values().tolist() == b.offset_index.values().tolist()
    assert a.time_index.keys().tolist() == b.time_index.keys().tolist()
    assert a.time_index.values().tolist() == b.time_index.values().tolist()
    assert (a.max_timestamp, a.next_offset, a.size) == (b.max_timestamp, b.next_offset, b.size)


def _respoiled(batch: bytes, how: str) -> bytes:
    """``batch`` made into something the one-batch path must leave to the scanned one."""
    buf = bytearray(batch)

    def set_field(fmt: str, at: int, value: int) -> None:
        struct.pack_into(fmt, buf, at, value)
        struct.pack_into(">I", buf, layout.CRC, crc32c(bytes(buf[layout.CRC_START:])))  # still a valid CRC

    if how == "crc":
        buf[-1] ^= 0xFF
    elif how == "count":
        set_field(">i", layout.RECORD_COUNT, struct.unpack_from(">i", buf, layout.RECORD_COUNT)[0] + 1)
    elif how == "control":
        set_field(">h", layout.ATTRIBUTES, struct.unpack_from(">h", buf, layout.ATTRIBUTES)[0] | layout.CONTROL_BIT)
    elif how.startswith("seq "):  # an idempotent producer's batch at that sequence
        set_field(">q", layout.PRODUCER_ID, 7)
        set_field(">h", layout.PRODUCER_EPOCH, 0)
        set_field(">i", layout.BASE_SEQUENCE, int(how.split()[1]))
    elif how == "transactional":
        set_field(">q", layout.PRODUCER_ID, 8)
        set_field(">h", layout.PRODUCER_EPOCH, 0)
        set_field(">i", layout.BASE_SEQUENCE, 0)
        set_field(">h", layout.ATTRIBUTES,
                  struct.unpack_from(">h", buf, layout.ATTRIBUTES)[0] | layout.TRANSACTIONAL_BIT)
    elif how == "magic":
        buf[layout.MAGIC] = 1
    elif how == "trailing":
        buf += b"\0" * 5
    elif how == "short":
        del buf[40:]
    return bytes(buf)


def _outcome(log: Log, append, data: bytes, epoch: int):
    try:
        info = append(bytearray(data), epoch)
    except Exception as exc:  # noqa: BLE001 - the same refusal is what is compared
        return type(exc).__name__, str(exc)
    return info


def _state(log: Log) -> tuple:
    segments = [(s.base_offset, open(s.log_path, "rb").read(), s.offset_index.keys().tolist(),
                 s.offset_index.values().tolist(), s.time_index.keys().tolist(), s.time_index.values().tolist(),
                 list(s.recent)) for s in log.segments]
    return segments, log.log_end_offset, log.written_offset, log.leader_epochs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.integers(1, 4), st.sampled_from([5, 100, 700]),
                                  st.sampled_from([0, 0, layout.CODEC_GZIP, layout.CODEC_ZSTD]),
                                  st.sampled_from(["", "", "", "crc", "count", "control", "magic", "trailing",
                                                   "short", "next", "next", "retry", "gap", "transactional"]),
                                  st.sampled_from([0, 0, 3])), min_size=1, max_size=25),
       segment_bytes=st.sampled_from([1500, 1 << 20]), max_message_bytes=st.sampled_from([600, 1 << 20]))
def test_a_batch_appended_alone_takes_the_same_way_as_the_scanned_path(tmp_path_factory, batches, segment_bytes,
                                                                       max_message_bytes):
    """Whatever a request's one batch is, valid or not, ``append`` (which tries
    its one-batch path first) and the scanned path every request can take
    leave the same log behind and answer the same, down to each error; so
    does ``append`` from memory it may not write (another worker's).  An
    idempotent producer's batches come next in its sequence, again (a retry),
    or past a gap."""
    config = LogConfig(segment_bytes=segment_bytes, max_message_bytes=max_message_bytes, index_interval_bytes=300)
    fast = Log.open(str(tmp_path_factory.mktemp("fast") / "t-0"), "t", 0, config)
    scanned = Log.open(str(tmp_path_factory.mktemp("scanned") / "t-0"), "t", 0, config)
    shared = Log.open(str(tmp_path_factory.mktemp("shared") / "t-0"), "t", 0, config)
    taken, expected = [], []
    one_batch = fast._append_one

    def spied(buf, leader_epoch, write, group_commit, unchanged=None):
        info = one_batch(buf, leader_epoch, write, group_commit, unchanged)
        taken.append(info is not None)
        return info
    fast._append_one = spied  # the instance's: which appends took the one-batch path
    next_seq, last_seq = 0, None  # the idempotent producer's
    for i, (count, size, codec, spoil, epoch) in enumerate(batches):
        sequences = {"next": f"seq {next_seq}", "retry": f"seq {last_seq if last_seq is not None else 0}",
                     "gap": f"seq {next_seq + 3}"}
        how: str = sequences[spoil] if spoil in sequences else spoil
        data = _respoiled(make_batch(count, timestamp=T0 + 7 * i, value_size=size, codec=codec, tag=f"b{i}"), how)
        fits = len(data) <= min(segment_bytes, max_message_bytes)
        seq = int(how.split()[1]) if how.startswith("seq ") else None
        # a producer the log has no state for may start anywhere; then it goes on in order
        in_sequence = seq is not None and (last_seq is None or seq == next_seq)
        expected.append(fits and (not spoil or in_sequence))
        if fits and in_sequence and seq is not None:
            last_seq, next_seq = seq, seq + count
        a = _outcome(fast, lambda buf, e: fast.append(buf, leader_epoch=e), data, epoch)
        b = _outcome(scanned, lambda buf, e: scanned._append_scanned(buf, e, None, True, "client"), data, epoch)
        source = bytes(data)  # read-only: a stamp in place would raise
        c = _outcome(shared, lambda _, e: shared.append(memoryview(source), leader_epoch=e, unchanged=lambda: True),
                     data, epoch)
        assert a == b == c, (i, spoil)
    assert _state(fast) == _state(scanned) == _state(shared)
    assert taken == expected, "every valid plain batch, and only those, took the one-batch path"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.integers(1, 4), st.sampled_from([5, 100, 700]),
                                  st.sampled_from([0, layout.CODEC_LZ4]), st.booleans(), st.integers(0, 3)),
                        min_size=1, max_size=20),
       deliveries=st.lists(st.sampled_from(["one", "one", "two", "three", "nine", "crc", "crc2", "again", "torn",
                                            "torn2"]), min_size=1, max_size=30),
       segment_bytes=st.sampled_from([1500, 1 << 20]))
def test_a_followers_few_batches_take_the_same_way_as_the_scanned_path(tmp_path_factory, batches, deliveries,
                                                                       segment_bytes):
    """A follower appends what its leader's log holds, a batch or a few per
    fetch, sometimes a corrupt one, one it has already, or one cut off:
    ``append_as_follower`` (its path for a few batches first) and the scanned
    path leave the same log and answer the same."""
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=300)
    leader = Log.open(str(tmp_path_factory.mktemp("leader") / "t-0"), "t", 0, LogConfig())
    seq = 0
    for i, (count, size, codec, idempotent, epoch) in enumerate(batches):
        data = make_batch(count, timestamp=T0 + 5 * i, value_size=size, codec=codec, tag=f"b{i}")
        if idempotent:
            data = _respoiled(data, f"seq {seq}")
            seq += count
        leader.append(data, leader_epoch=epoch)
    led = [bytes(leader.read_records(o, 1)) for o in
           sorted({b.header.base_offset for b in batches_in(leader.read_records(0, 1 << 30))})]
    fast = Log.open(str(tmp_path_factory.mktemp("fast") / "t-0"), "t", 0, config)
    scanned = Log.open(str(tmp_path_factory.mktemp("scanned") / "t-0"), "t", 0, config)
    at = 0
    for how in deliveries:
        if at >= len(led):
            break
        def spoilt(batch: bytes) -> bytes:
            return batch[:-1] + bytes([batch[-1] ^ 1])
        data = {"one": led[at], "two": b"".join(led[at:at + 2]), "three": b"".join(led[at:at + 3]),
                "nine": b"".join(led[at:at + 9]), "crc": spoilt(led[at]),
                "crc2": led[at] + b"".join(spoilt(b) for b in led[at + 1:at + 2]),
                "again": led[max(at - 1, 0)], "torn": led[at][:-3], "torn2": b"".join(led[at:at + 2])[:-3]}[how]
        a = _outcome(fast, lambda buf, _: fast.append_as_follower(buf), data, 0)
        b = _outcome(scanned, lambda buf, _: scanned._follow_scanned(buf), data, 0)
        assert a == b, how
        at = len([o for o in range(len(led))
                  if batches_in(led[o])[0].header.base_offset < fast.log_end_offset])
    assert _state(fast) == _state(scanned)
    assert fast.producer_state.producers == scanned.producer_state.producers


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3), st.sampled_from([5, 100, 400])),
                        min_size=1, max_size=30),
       cut=st.one_of(st.none(), st.integers(0, 40)), segment_bytes=st.sampled_from([4500, 1 << 20]))
def test_reads_at_the_tail_from_the_recent_batches_match_the_scan(tmp_path_factory, appends, cut, segment_bytes):
    """``LogSegment.read`` locates an offset among the segment's recent batches,
    or where an earlier read ended, without the index: for every offset, byte
    limit, offset bound and ``min_one``, in every segment, after appends of
    one batch or several, rolls, and reads before a truncation, it answers
    exactly as the index and a scan of the segment do."""
    log = Log.open(str(tmp_path_factory.mktemp("recent") / "t-0"), "t", 0,
                   LogConfig(segment_bytes=segment_bytes, index_interval_bytes=300))

    def append(items) -> None:
        for i, (batches, count, size) in enumerate(items):
            log.append(bytearray(b"".join(make_batch(count, value_size=size, tag=f"a{i}b{j}") for j in range(batches))))
    append(appends)
    if cut is not None:
        for segment in log.segments:  # reads before the cut leave cursors where batches are cut and written anew
            for offset in range(segment.base_offset, log.log_end_offset):
                segment.read(offset, 150)
        log.truncate_to(min(cut, log.log_end_offset))
        append(appends[:3])
    end = log.log_end_offset
    answered_from_recent = 0
    for segment in log.segments:
        for offset in range(segment.base_offset - 1, end + 2):
            for max_bytes in (0, 1, 150, 800, 2500, 1 << 20):
                for max_offset in (None, end, max(0, end - 3)):
                    for min_one in (True, False):
                        expected = _read_by_the_index(segment, offset, max_bytes, max_offset, min_one)
                        assert segment.read(offset, max_bytes, max_offset, min_one) == expected, \
                            (segment.base_offset, offset, max_bytes, max_offset, min_one)
                        answered_from_recent += bool(segment.recent) and offset >= segment.recent[0][0]
    assert answered_from_recent > 0


def _read_by_the_index(segment, offset: int, max_bytes: int, max_offset, min_one: bool):
    """``read_scanned`` as if no read had ended anywhere before (no cursor to start from)."""
    kept = dict(segment._cursors)
    segment._cursors.clear()
    try:
        return segment.read_scanned(offset, max_bytes, max_offset, min_one)
    finally:
        segment._cursors.clear()
        segment._cursors.update(kept)


def test_a_follower_behind_the_recent_batches_is_found_where_its_last_read_ended(tmp_path, monkeypatch):
    """A follower further behind than the recent batches fetches batch after
    batch (its byte limit is below one batch: one each time); after its first
    read, each next one starts where the last ended, so the index is not
    searched again, and every answer is the index's."""
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(index_interval_bytes=300))
    for i in range(RECENT_BATCHES * 3):
        log.append(bytearray(make_batch(3, value_size=200, tag=f"b{i}")))
    segment = log.active_segment
    behind = range(0, 3 * RECENT_BATCHES * 2, 3)  # the batches older than the recent ones
    expected = [_read_by_the_index(segment, offset, 1, None, True) for offset in behind]
    searched: list[int] = []
    real_find = segment.find_batch
    monkeypatch.setattr(segment, "find_batch", lambda at: searched.append(at) or real_find(at))
    got = []
    for offset in behind:
        found = log.read(offset, 1)
        assert found is not None
        got.append((found.position, found.size))
    assert got == expected
    assert searched == [0]  # only the first read, which no earlier read ended at


def test_a_flush_fsyncs_the_indexes_only_when_they_changed(tmp_path, monkeypatch):
    """With flush.messages=1 most flushes add no index entry (one goes in every
    index.interval.bytes): the log file is fsynced, its unchanged indexes are not."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.endswith((".log", ".index", ".timeindex", ".txnindex")):  # the segment's files
            synced.append(name.rsplit(".", 1)[-1])
        real_fsync(fd)

    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(flush_messages=1, index_interval_bytes=10_000))
    monkeypatch.setattr(os, "fsync", fsync)
    log.append(make_batch(1))
    log.append(make_batch(1))
    assert synced == ["log", "log"], "no index entry yet: only the log, each time"
    log.append(make_batch(1, value_size=10_000))
    synced.clear()
    log.append(make_batch(1))  # past index.interval.bytes since the last entry: one in each index
    assert sorted(synced) == ["index", "log", "timeindex"]
