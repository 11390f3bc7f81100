"""Recovery on start: torn tails, garbage, bad CRCs, lost or corrupt indexes."""

import logging
import os
import struct

import pytest

from hpbroker.kernels import layout
from hpbroker.storage import Log, LogConfig, LogManager, checkpoints, filenames
from tests.log_helpers import make_batch, read_all

T0 = 1_700_000_000_000


def fill(tmp_path, batches=20, **config):
    config = {"segment_bytes": 2000, "index_interval_bytes": 100, **config}
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(**config))
    for i in range(batches):
        log.append(make_batch(1 + i % 4, timestamp=T0 + i * 10, tag=f"b{i}"))
    return log


def crash(log: Log) -> None:
    """Stop without flushing, checkpoints or the clean-shutdown marker."""
    for segment in log.segments:
        segment.close()


def reopen(log: Log, recovery_point: int = 0) -> Log:
    return Log.open(log.directory, log.topic, log.partition, log.config, recovery_point=recovery_point)


def index_files(log):
    out = {}
    for segment in log.segments:
        for path in (segment.offset_index.path, segment.time_index.path):
            with open(path, "rb") as f:
                out[os.path.basename(path)] = f.read()
    return out


def test_rebuilt_indexes_equal_the_ones_written_while_appending(tmp_path):
    log = fill(tmp_path, batches=60)
    assert len(log.segments) > 3
    log.active_segment.seal_time_index()  # as a close would; rolled ones already were
    log.active_segment.write_index_entries()
    written = index_files(log)
    assert any(len(v) > 0 for k, v in written.items() if k.endswith(".index"))
    crash(log)
    for name in written:
        os.unlink(os.path.join(log.directory, name))
    again = reopen(log)
    rebuilt = index_files(again)
    assert rebuilt == written


def test_torn_tail_is_cut_at_the_last_whole_batch(tmp_path, caplog):
    log = fill(tmp_path)
    expected = read_all(log)
    last = log.active_segment
    last_batch = log.read(log.written_offset - 1, 1)
    assert last_batch is not None
    torn_base = struct.unpack_from(">q", last_batch.tobytes())[0]
    crash(log)
    with open(last.log_path, "r+b") as f:
        f.truncate(last_batch.position + last_batch.size - 7)
    with caplog.at_level(logging.WARNING):
        again = reopen(log)
    assert again.log_end_offset == torn_base
    assert read_all(again) == [r for r in expected if r.offset < torn_base]
    assert "torn write" in caplog.text and f"cut {last_batch.size - 7} bytes" in caplog.text
    assert again.append(make_batch(1)).first_offset == torn_base


@pytest.mark.parametrize(
    "garbage,reason",
    [
        (os.urandom(3), "torn write"),
        (b"\x00" * 64, "impossible batch length"),
        (struct.pack(">qiib", 123, 10**9, 0, 2) + b"x" * 40, "torn write"),
        (struct.pack(">qiib", 500, 49, 0, 9) + b"\x01" * 49, "unknown magic"),
    ],
)
def test_garbage_after_the_last_batch_is_cut(tmp_path, caplog, garbage, reason):
    log = fill(tmp_path)
    expected = read_all(log)
    end = log.log_end_offset
    path = log.active_segment.log_path
    crash(log)
    with open(path, "ab") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING):
        again = reopen(log)
    assert again.log_end_offset == end and read_all(again) == expected
    assert reason in caplog.text
    assert os.path.getsize(path) == again.active_segment.size


def test_a_bad_crc_mid_log_cuts_there_and_drops_later_segments(tmp_path, caplog):
    log = fill(tmp_path, batches=60)
    victim = log.segments[1]
    found = victim.find_batch(victim.base_offset + 3)
    assert found is not None
    paths_after = [s.log_path for s in log.segments[2:]]
    crash(log)
    with open(victim.log_path, "r+b") as f:
        f.seek(found.position + found.size - 1)
        byte = f.read(1)
        f.seek(found.position + found.size - 1)
        f.write(bytes([byte[0] ^ 0x55]))
    with caplog.at_level(logging.WARNING):
        again = reopen(log)
    assert again.log_end_offset == found.base_offset
    assert [s.base_offset for s in again.segments] == [log.segments[0].base_offset, victim.base_offset]
    assert not any(os.path.exists(p) for p in paths_after)
    assert "CRC mismatch" in caplog.text


def test_segments_below_the_recovery_point_are_trusted_but_bad_indexes_rebuilt(tmp_path, caplog):
    log = fill(tmp_path, batches=60)
    expected = read_all(log)
    first = log.segments[0]
    log.flush()
    point = log.flushed_offset
    crash(log)
    with open(first.offset_index.path, "r+b") as f:  # an entry pointing past the end of the log
        f.write(struct.pack(">ii", 1, 10**8))
    os.unlink(log.segments[1].time_index.path)
    with caplog.at_level(logging.WARNING):
        again = reopen(log, recovery_point=point)
    assert read_all(again) == expected
    assert "rebuilding indexes" in caplog.text
    assert again.segments[0].offset_index.lookup(again.segments[0].next_offset - 1) < again.segments[0].size


def test_zero_padded_index_from_an_unclean_kafka_stop_is_cut(tmp_path):
    log = fill(tmp_path, batches=10, segment_bytes=10**6)
    index = log.active_segment.offset_index
    entries = len(index)
    assert entries > 0
    log.close()
    with open(index.path, "ab") as f:
        f.write(b"\x00" * 8 * 100)  # Kafka preallocates its index files
    again = Log.open(log.directory, "t", 0, log.config, recovery_point=log.flushed_offset, clean_shutdown=True)
    assert len(again.active_segment.offset_index) == entries


def test_log_manager_writes_kafka_checkpoints_and_the_clean_shutdown_marker(tmp_path):
    root = str(tmp_path / "data")
    manager = LogManager([root], LogConfig(flush_messages=1)).open()
    log = manager.get_or_create_log("events", 2)
    log.append(make_batch(3))
    other = manager.get_or_create_log("other", 0)
    other.append(make_batch(5))
    other.delete_records_before(4)
    manager.close()
    with open(os.path.join(root, filenames.RECOVERY_POINT_CHECKPOINT)) as f:
        assert f.read() == "0\n2\nevents 2 3\nother 0 5\n"
    with open(os.path.join(root, filenames.LOG_START_OFFSET_CHECKPOINT)) as f:
        assert f.read() == "0\n1\nother 0 4\n"
    assert os.path.exists(os.path.join(root, filenames.CLEAN_SHUTDOWN_FILE))
    props = checkpoints.read_properties(os.path.join(root, filenames.META_PROPERTIES))
    assert props["version"] == "0" and props["broker.id"] == "0" and len(props["cluster.id"]) == 22
    topic_id = checkpoints.read_partition_metadata(os.path.join(root, "events-2", filenames.PARTITION_METADATA))
    assert topic_id.int != 0

    again = LogManager([root]).open()
    assert again.had_clean_shutdown and not os.path.exists(os.path.join(root, filenames.CLEAN_SHUTDOWN_FILE))
    other, events = again.get_log("other", 0), again.get_log("events", 2)
    assert other is not None and events is not None
    assert other.log_start_offset == 4
    assert [r.offset for r in read_all(events)] == [0, 1, 2]
    again.close()


def test_a_second_broker_on_the_same_dir_is_refused(tmp_path):
    from hpbroker.storage import LogDirInUseError

    first = LogManager([str(tmp_path)]).open()
    with pytest.raises(LogDirInUseError):
        LogManager([str(tmp_path)]).open()
    first.close()
    LogManager([str(tmp_path)]).open().close()


def test_meta_properties_of_another_broker_is_refused(tmp_path):
    from hpbroker.storage import StorageError

    LogManager([str(tmp_path)], broker_id=1).open().close()
    with pytest.raises(StorageError, match="broker.id=1"):
        LogManager([str(tmp_path)], broker_id=2).open()


def test_interrupted_deletes_and_swaps_are_finished_on_start(tmp_path):
    log = fill(tmp_path, batches=40)
    bases = [s.base_offset for s in log.segments]
    log.close()
    directory = log.directory
    open(os.path.join(directory, f"{bases[0]:020d}.log.deleted"), "wb").close()
    open(os.path.join(directory, f"{999:020d}.index"), "wb").close()  # an index without its log
    again = Log.open(directory, "t", 0, log.config, recovery_point=log.flushed_offset, clean_shutdown=True)
    names = os.listdir(directory)
    assert not any(n.endswith(".deleted") for n in names)
    assert f"{999:020d}.index" not in names
    assert [s.base_offset for s in again.segments] == bases


def test_batch_header_layout_is_pinned():
    assert layout.BATCH_HEADER_SIZE == 61
    assert layout.LOG_OVERHEAD == 12
    assert (layout.PARTITION_LEADER_EPOCH, layout.MAGIC, layout.CRC, layout.ATTRIBUTES) == (12, 16, 17, 21)
    assert (layout.LEGACY_V0_MIN_SIZE, layout.LEGACY_V1_MIN_SIZE) == (26, 34)
