"""Appends straight from another worker's memory (``Log.append(unchanged=...)``,
the payload arena's ``view``/``unchanged``): the records are read where they
lie and never written to, and a write whose source changed under it is
undone before anyone can read it."""

import functools
import itertools
import multiprocessing
import os
import struct
import time

import pytest
from crc32c import crc32c

from hpbroker.kernels import layout
from hpbroker.records import Record, encode_batch
from hpbroker.shared.payload_arena import ArenaRef, PayloadArena, RefusedPayload
from hpbroker.storage import CorruptBatchError, KafkaStorageError, Log, LogConfig
from tests.log_helpers import batches_in, make_batch, read_all


def open_log(tmp_path, **config):
    return Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(**config))


class Source:
    """Records in memory the log may not write: a read-only view, and a switch for ``unchanged``."""

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.view = memoryview(self.data)  # read-only: a stamp would raise
        self.holds = True
        self.asked = 0

    def unchanged(self) -> bool:
        self.asked += 1
        return self.holds


@pytest.mark.parametrize("config", [{}, {"cleanup_policy": "compact"}], ids=["one batch", "scanned"])
def test_records_are_appended_from_where_they_lie_without_being_written_to(tmp_path, config):
    log = open_log(tmp_path, **config)
    log.append(make_batch(3, tag="first"))
    source = Source(make_batch(2, tag="second"))
    info = log.append(source.view, leader_epoch=4, unchanged=source.unchanged)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert source.asked == 1, "checked once, after the write"
    assert source.data == bytes(make_batch(2, tag="second")), "the source is never stamped"
    records = read_all(log)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.key for r in records[3:]] == [b"second0", b"second1"]
    written = batches_in(log.read_records(3))
    assert written[0].header.base_offset == 3 and written[0].header.partition_leader_epoch == 4


@pytest.mark.parametrize("config", [{}, {"cleanup_policy": "compact"}], ids=["one batch", "scanned"])
def test_a_source_that_changed_under_the_write_leaves_nothing_appended(tmp_path, config):
    log = open_log(tmp_path, **config)
    log.append(make_batch(3, tag="first"))
    size = os.path.getsize(log.active_segment.log_path)
    changed = Source(make_batch(2, tag="torn"))
    changed.holds = False
    with pytest.raises(KafkaStorageError, match="rewritten"):
        log.append(changed.view, unchanged=changed.unchanged)
    assert (log.log_end_offset, log.written_offset) == (3, 3)
    assert os.path.getsize(log.active_segment.log_path) == size, "the written bytes are cut off again"
    info = log.append(make_batch(2, tag="next"))
    assert (info.first_offset, info.last_offset) == (3, 4), "the offsets are given out again"
    assert [r.key for r in read_all(log)] == [b"first0", b"first1", b"first2", b"next0", b"next1"]


def test_an_idempotent_batch_whose_source_changed_can_be_sent_again(tmp_path):
    log = open_log(tmp_path)
    batch = bytearray(make_batch(2))
    struct.pack_into(">qhi", batch, layout.PRODUCER_ID, 1000, 0, 0)  # producer id, epoch, base sequence
    struct.pack_into(">I", batch, layout.CRC, crc32c(bytes(batch[layout.CRC_START:])))
    changed = Source(batch)
    changed.holds = False
    with pytest.raises(KafkaStorageError):
        log.append(changed.view, unchanged=changed.unchanged)
    info = log.append(bytearray(batch))  # the producer's retry: not a duplicate, not out of sequence
    assert (info.first_offset, info.last_offset, info.batches) == (0, 1, 1)


def _batch_of(fill: int, size: int) -> bytes:
    return bytes(encode_batch([Record(offset=0, timestamp=1_700_000_000_000, key=None, value=bytes([fill]) * size)]))


def _restart_and_rewrite_forever(arena: PayloadArena, batches: list[bytes]) -> None:
    """A sender that restarts again and again, each time writing one of
    ``batches`` (all of one size) at its region's start, then resting a little
    so that some appends get through whole."""
    for batch in itertools.cycle(batches):
        arena.sender(0).put(batch)
        time.sleep(0.0002)


def test_no_append_keeps_a_payload_rewritten_under_it(tmp_path):
    """The owner's side of the arena's promise: an append from a slot that its
    sender's successor rewrites meanwhile is refused or undone, never written
    torn: every batch in the log is whole (its CRC holds) and of one fill."""
    size = 256 << 10  # large enough that rewrites land inside the owner's write
    batches = [_batch_of(fill, size) for fill in (0x11, 0x22, 0x33, 0x44)]
    arena = PayloadArena(1, 64 + 4 * (size + 4096))
    writer = multiprocessing.get_context("fork").Process(target=_restart_and_rewrite_forever, args=(arena, batches),
                                                         daemon=True)
    writer.start()
    receiver = arena.receiver()
    log = open_log(tmp_path)
    appended = refused = undone = 0
    try:
        deadline = time.monotonic() + 60
        while (appended < 500 or undone < 50) and time.monotonic() < deadline:
            incarnation = struct.unpack_from("<q", arena.memory, 0)[0]
            ref = ArenaRef(0, 0, len(batches[0]), incarnation << 40)
            try:
                view = receiver.view(ref)
                log.append(view, unchanged=functools.partial(receiver.unchanged, ref))
            except RefusedPayload:
                refused += 1
                continue
            except KafkaStorageError:
                undone += 1
                continue
            except CorruptBatchError:  # rewritten before the CRC was checked: refused there
                refused += 1
                continue
            appended += 1
    finally:
        writer.kill()
        writer.join()
    assert undone >= 50, f"rewrites should land inside writes ({appended} appended, {undone} undone)"
    records = read_all(log)  # every batch's CRC checked
    assert len(records) == appended
    for record in records:
        assert record.value is not None and record.value == record.value[:1] * size
