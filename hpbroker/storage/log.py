"""A partition's log: the ordered segments of ``<log.dir>/<topic>-<partition>/``.

Offsets, in the order they must always keep::

    log_start_offset <= flushed_offset <= written_offset <= log_end_offset

* ``log_end_offset`` (appended): the next offset ``append()`` will assign.
  Batches below it have offsets, but may still be staged in memory.
* ``written_offset``: batches below it are in the file (the page cache).
  Readers see exactly these; they survive a crash of this process.
* ``flushed_offset``: batches below it were fsynced and survive a power loss.
  It is the recovery point: after an unclean stop, only segments from the one
  holding it onwards are scanned.

``append()`` writes through by default (``write=False`` only stages, for a
caller that appends to many partitions and writes them together); the flush
policy (``flush.messages`` / ``flush.ms``) is applied after each write and by
``tick()``.  A client's produce may be a group commit (``group_commit``):
the fsync ``flush.messages`` asks for is left to the owner, which does one
for every such write of its turn (``group_flush``, ``flush_owed``), and the
high watermark stays below those writes until then, as it would have under
an fsync done at once (so consumers, and other workers, read only what the
disk has); ``owes_flush`` tells the produce's answer to wait for it too.

The segment list is a tuple replaced wholesale on every change
(copy-on-write): a reader's binary search runs over a snapshot that a
concurrent roll or delete never mutates.

Idempotent producers: ``append()`` checks each batch's producer id, epoch and
sequence against ``producer_state`` (see ``producer_state.py``) before taking
it, and records it after.  That state is derived from the log: it is written
to ``<offset>.snapshot`` at each roll and at close, and on open, after a cut
or a failed write it is reloaded from the newest snapshot at or below the log
end and the batches after it are replayed.

Opening a directory, recovery included, is ``log_loader.py``; the leader
epochs of appended batches live in ``leader_epochs.py``'s cache and file.  A
leader's ``append()`` assigns offsets, a follower's ``append_as_follower()``
keeps the leader's; both then end in the same steps (``_add_batches``).  The
log start only moves up: retention, DeleteRecords (``delete_records_before``)
and, on a follower, the leader's log start (``follow_leader_log_start``).
"""

import bisect
import collections
import contextlib
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from hpbroker.clock import now_ms
from hpbroker.kernels import layout, scan_batches
from hpbroker.kernels.batch_scan import STOP_END, STOP_TORN
from hpbroker.kernels.layout import CONTROL_BIT, TRANSACTIONAL_BIT
from hpbroker.records import CorruptRecordError, batch as batch_format
from hpbroker.records.recompress import recompress_batches
from hpbroker.storage import append_validation, background_io, checkpoints, filenames, leader_epochs, log_loader
from hpbroker.storage.config import LogConfig
from hpbroker.storage.errors import (
    CorruptBatchError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    UnsupportedFormatError,
)
from hpbroker.storage.leader_epochs import LeaderEpochCache
from hpbroker.storage.producer_state import CheckResult, ProducerStateManager, Verdict
from hpbroker.storage.segment import LogSegment
from hpbroker.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

_INT32_MAX = (1 << 31) - 1
_BASE_OFFSET = struct.Struct(">q")
# a v2 batch header (layout.py): base offset, length, leader epoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEADER_EPOCH = struct.Struct(">i")
_STAMPED = layout.MAGIC  # an append rewrites the base offset and the partition leader epoch, all before magic
_NOT_PLAIN = CONTROL_BIT | TRANSACTIONAL_BIT  # batches the one-batch path leaves to the scanned one
_FEW_BATCHES = 8  # a follower's response of more batches is scanned: the scan's setup is then worth it

# Who appends (Kafka's AppendOrigin): only the broker itself may write control
# batches (transaction markers); clients' batches get the stricter checks.
ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
_ORIGINS = (ORIGIN_CLIENT, ORIGIN_COORDINATOR)

_OK = CheckResult(Verdict.OK)
_PRODUCER_ERRORS = {
    Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceError,
    Verdict.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    Verdict.INVALID_TXN_STATE: InvalidTxnStateError,
}


class AppendInfo(NamedTuple):  # a tuple: every append makes one, and a frozen dataclass costs 4x as much
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    batches: int
    records: int
    size: int


@dataclass(frozen=True)
class ReadSlice:
    """Whole batches of one segment: ``size`` bytes at ``position`` of ``fd``,
    ready for ``os.sendfile``.  The descriptor stays valid while the segment is
    merely scheduled for deletion."""

    segment: LogSegment
    position: int
    size: int
    first_offset: int

    @property
    def fd(self) -> int:
        return self.segment.fd

    def tobytes(self) -> bytes:
        return self.segment.read_bytes(self.position, self.size)


def _writable(buffer) -> bool:
    if isinstance(buffer, bytearray):
        return True
    return (isinstance(buffer, memoryview) and not buffer.readonly and buffer.contiguous
            and buffer.format in ("B", "b", "c"))


class Log:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.log_start_offset = 0
        self._high_watermark: int | None = None  # None: everything written (one replica)
        # called (on the thread that moved them) when the log start, the written
        # end or the high watermark move: the owner publishes them (``hpbroker.shared``)
        self.on_offsets_changed: Callable[[], None] | None = None
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._log_end_offset = 0
        self._written_offset = 0
        self._flushed_offset = 0
        self._last_flush_ms = now_ms()
        self._flush_requested_to = 0  # set by a roll; done by the next tick(), as Kafka's scheduler does
        # Where tick() sends its roll and time flushes and its segment unlinks,
        # and delete() its directory (``background_io``); None: done inline.
        self.storage_io: Executor | None = None
        self._flush_job: background_io.FlushJob | None = None
        # group commit (``write``): (start, end) of each write whose flush.messages
        # fsync is not done yet, oldest first; why the last fsync failed (None
        # once one succeeds) and what it was to cover
        self._owed_flushes: collections.deque[tuple[int, int]] = collections.deque()
        self.flush_failure: KafkaStorageError | None = None
        self._failed_to = 0
        # group commit: asked (once until it calls ``flush_owed``) to fsync this
        # log's owed writes soon, together with the writes that come meanwhile
        self.group_flush: Callable[[Log], None] | None = None
        self._group_flush_asked = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._leader_epochs = LeaderEpochCache()
        self.producer_state = ProducerStateManager(directory, config.producer_id_expiration_ms)
        self._last_producer_expiry_ms = now_ms()
        self._unsynced_snapshot: str | None = None  # written at a roll, fsynced by the next flush
        # Guards the segment list and the pending deletes against the cleaner
        # thread's swap; taken only by roll, delete, swap and close, never by
        # an append that does not roll.
        self._lock = threading.Lock()
        self._clean_lock = threading.Lock()  # one cleaning pass at a time
        self._closed = False
        self.cleaner_checkpoint = 0  # first dirty offset: below it the log was compacted
        self.latest_delete_horizon = -1  # newest horizon of the tombstones the last pass kept

    # --- opening -------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        topic_id=None,
        cleaner_offset: int | None = None,
    ) -> "Log":
        """Open (creating if needed) a partition directory and recover it.
        ``cleaner_offset`` is this log's row of ``cleaner-offset-checkpoint``."""
        os.makedirs(directory, exist_ok=True)
        self = cls(directory, topic, partition, config)
        metadata = os.path.join(directory, filenames.PARTITION_METADATA)
        if topic_id is not None and not os.path.exists(metadata):
            checkpoints.write_partition_metadata(metadata, topic_id)
        loaded = log_loader.load(
            directory, self._name, self._new_segment, self.producer_state,
            recovery_point=recovery_point, log_start_offset=log_start_offset, clean_shutdown=clean_shutdown,
        )
        self._set_segments(loaded.segments)
        self.log_start_offset = loaded.log_start_offset
        self._log_end_offset = self._written_offset = loaded.log_end_offset
        self._flushed_offset = self._flush_requested_to = loaded.recovery_point
        self._leader_epochs = loaded.leader_epochs
        self.cleaner_checkpoint = self.log_start_offset if cleaner_offset is None else cleaner_offset
        return self

    @property
    def topic_id(self):
        path = os.path.join(self.directory, filenames.PARTITION_METADATA)
        return checkpoints.read_partition_metadata(path) if os.path.exists(path) else None

    def _new_segment(self, base_offset: int, created_ms: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=created_ms,
            reserve_ahead=True,
        )

    @property
    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _set_segments(self, segments: tuple) -> None:
        self._segments = segments
        self._bases = tuple(s.base_offset for s in segments)
        self._has_aborts: bool | None = None  # looked at again when next asked

    # --- offsets -------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def written_offset(self) -> int:
        return self._written_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    recovery_point = flushed_offset

    @property
    def high_watermark(self) -> int:
        """What consumers may read.  A lone replica's is everything written;
        a replicated partition's is set by its leader's ISR (``replication``).
        Either stops short of the first write still waiting for its
        ``flush.messages`` fsync (``group_commit``), as an inline flush would
        have held it until the fsync."""
        end = self._written_offset
        if self._owed_flushes:
            end = max(self._flushed_offset, self._owed_flushes[0][0])
        if self._high_watermark is None:
            return end
        return min(self._high_watermark, end)

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        if offset != self._high_watermark:
            self._high_watermark = offset
            self._offsets_changed()

    @property
    def last_stable_offset(self) -> int:
        """What read_committed consumers may read: the high watermark, or before
        it the first offset of a transaction still open or whose end the high
        watermark has not passed yet (Kafka's LSO)."""
        high_watermark = self.high_watermark
        unstable = self.producer_state.first_unstable_offset(high_watermark)
        return high_watermark if unstable is None else min(unstable, high_watermark)

    @property
    def has_aborted_transactions(self) -> bool:
        """Some segment indexes an aborted transaction (a read_committed reader
        then needs the index; most logs never have one)."""
        if self._has_aborts is None:
            self._has_aborts = any(s.txn_index.entries for s in self._segments)
        return self._has_aborts

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[fetch_offset, upper_bound)``,
        for a read_committed fetch: from the segment holding ``fetch_offset`` on,
        until an entry's LSO shows that no later abort can reach back into the
        range (Kafka's collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for segment in self._segments:
            if segment.next_offset <= fetch_offset:
                continue
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found += entries
            if complete:
                break
        return found

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # --- appending -----------------------------------------------------------
    def append(
        self, records, *, leader_epoch: int = 0, timestamp_ms: int | None = None, write: bool = True,
        origin: str = ORIGIN_CLIENT, group_commit: bool = False, unchanged: Callable[[], bool] | None = None
    ) -> AppendInfo:
        """Assign offsets to one or more v2 batches and add them to the log.

        Each batch must be whole with a valid CRC; its base offset is rewritten
        and the partition leader epoch stamped (both outside the CRC); with
        ``message.timestamp.type=LogAppendTime`` the max timestamp is set and the
        CRC recomputed.  With a ``compression.type`` other than ``producer``,
        batches in another codec are first recompressed into it (records,
        timestamps and producer fields unchanged, see ``records.recompress``),
        as Kafka's LogValidator does.  Returns once the batches are written (page cache), or
        only staged with ``write=False``.  Raises a StorageError subclass (with
        the Kafka error code) and appends nothing when any batch is rejected.

        A writable buffer (bytearray, writable memoryview) is stamped in place
        rather than copied, since a network layer receives into one anyway; it
        must stay untouched until the batches are written.

        With ``unchanged`` the records lie in memory another worker owns and
        rewrites once it stops waiting for this append (the payload arena).
        They are read where they lie and never written to: the usual single
        batch is written from there, what the append stamps going into a
        private copy of its head; any other append works on a private copy.
        ``unchanged()`` is asked after the write and before the new end is
        published; false (the sender restarted meanwhile) undoes the write and
        raises KafkaStorageError, nothing appended.

        Batches with a producer id are checked against the producer state: a
        retry of one already in the log appends nothing and answers its
        original offsets (``batches == 0``); a sequence gap raises
        OutOfOrderSequenceError, an old epoch InvalidProducerEpochError.
        ``origin=ORIGIN_COORDINATOR`` (the broker itself) may append control
        batches, which clients may not.

        With ``group_commit`` (a client's produce, whose answer the caller can
        hold back) the fsync ``flush.messages`` asks for is not done here: the
        log's owner is asked for it (``group_flush``) and does one for all the
        appends of its turn, and consumers see none of the batches until it is
        done (``owes_flush`` says whether an answer must wait for it).
        """
        if origin not in _ORIGINS:
            raise ValueError(f"unknown append origin {origin!r}")
        fast = timestamp_ms is None and not self._one_batch_needs_more
        if unchanged is not None:
            if fast:
                appended = self._append_one(records, leader_epoch, write, group_commit, unchanged)
                if appended is not None:
                    return appended
            # the check after the write covers this copy too
            return self._append_scanned(bytearray(records), leader_epoch, timestamp_ms, write, origin, group_commit,
                                        unchanged)
        buf = records if _writable(records) else bytearray(records)
        if fast:
            appended = self._append_one(buf, leader_epoch, write, group_commit)
            if appended is not None:
                return appended
        return self._append_scanned(buf, leader_epoch, timestamp_ms, write, origin, group_commit)

    @property
    def _one_batch_needs_more(self) -> bool:
        """The topic's settings make every append take the whole path: keys to
        check (compacted), a codec to convert to, a time to stamp."""
        config = self.config
        return config.compact or config.target_codec is not None or config.log_append_time

    def _append_one(self, buf, leader_epoch: int, write: bool, group_commit: bool,
                    unchanged: Callable[[], bool] | None = None) -> AppendInfo | None:
        """The usual produce, in scalars: one whole v2 data batch, plain or
        idempotent (not transactional), valid in every way ``_append_scanned``
        checks and, for a producer's, next in its sequence.  None for anything
        else (a retry, a gap, a fenced epoch too), which ``_append_scanned``
        then appends, answers or refuses with its error; a property test holds
        the two to the same result.  With ``unchanged`` (see ``append``) ``buf``
        is not written to: the stamps go into a copy of its head."""
        size = len(buf)
        if size < layout.BATCH_HEADER_SIZE:
            return None
        (_base, length, _epoch, magic, crc, attributes, last_delta, _base_ts, max_timestamp, producer_id,
         producer_epoch, base_sequence, count) = _BATCH_HEADER.unpack_from(buf, 0)
        config = self.config
        if (length + layout.LOG_OVERHEAD != size or magic != 2 or attributes & _NOT_PLAIN
                or count < 1 or last_delta + 1 != count or size > config.max_message_bytes
                or size > config.segment_bytes or crc32c(memoryview(buf)[layout.CRC_START:]) != crc):
            return None
        idempotent = producer_id >= 0
        if idempotent and (base_sequence < 0 or self.producer_state.check_one(
                producer_id, producer_epoch, base_sequence, last_delta).verdict is not Verdict.OK):
            return None
        first = self._log_end_offset
        last = first + last_delta
        head = None if unchanged is None else bytearray(memoryview(buf)[:_STAMPED])
        stamped = buf if head is None else head
        _BASE_OFFSET.pack_into(stamped, 0, first)
        _LEADER_EPOCH.pack_into(stamped, layout.PARTITION_LEADER_EPOCH, leader_epoch)
        self._add_one(buf, first, last, max_timestamp, leader_epoch,
                      (producer_id, producer_epoch, base_sequence, attributes) if idempotent else None, write=write,
                      group_commit=group_commit, head=head, unchanged=unchanged)
        return AppendInfo(first_offset=first, last_offset=last, max_timestamp=max_timestamp, log_append_time=-1,
                          batches=1, records=count, size=size)

    def _append_scanned(self, buf, leader_epoch: int, timestamp_ms: int | None, write: bool,
                        origin: str, group_commit: bool = False,
                        unchanged: Callable[[], bool] | None = None) -> AppendInfo:
        """``append`` for any request: every batch scanned, checked and stamped by the kernels."""
        scan = scan_batches(np.frombuffer(buf, np.uint8))
        idempotent = append_validation.validate(scan, len(buf), self.config, self._name,
                                                from_client=origin == ORIGIN_CLIENT)
        if self.config.compact:
            append_validation.check_keys(buf, scan, self._name)
        checked = (self.producer_state.check_batches(scan, sequences=origin == ORIGIN_CLIENT) if idempotent
                   else _OK)
        if checked.verdict is not Verdict.OK:
            if checked.verdict is Verdict.DUPLICATE:
                return AppendInfo(
                    first_offset=checked.first_offset,
                    last_offset=checked.last_offset,
                    max_timestamp=checked.log_append_time,
                    log_append_time=checked.log_append_time if self.config.log_append_time else -1,
                    batches=0,
                    records=0,
                    size=0,
                )
            raise _PRODUCER_ERRORS[checked.verdict](f"{self._name}: {checked.message}")
        if self.config.target_codec is not None:  # compression.type=producer costs nothing here
            buf, scan = self._recompress(buf, scan)
        counts = scan.last_offset - scan.base_offset + 1
        bases = self._log_end_offset + np.concatenate(([0], np.cumsum(counts)[:-1]))
        last_offsets = bases + counts - 1
        append_time = -1
        max_timestamps = scan.max_timestamp
        if self.config.log_append_time:
            append_time = now_ms() if timestamp_ms is None else timestamp_ms
            max_timestamps = np.full(len(bases), append_time, np.int64)
        for pos, base in zip(scan.position.tolist(), bases.tolist()):
            _BASE_OFFSET.pack_into(buf, pos, base)
            batch_format.set_partition_leader_epoch(buf, pos, leader_epoch)
            if append_time >= 0:
                batch_format.set_log_append_time(buf, pos, append_time)
        # the whole request is of one epoch: its first batch starts it if new
        self._add_batches(buf, scan, bases, last_offsets, max_timestamps, [(leader_epoch, int(bases[0]))],
                          producers=idempotent, write=write, group_commit=group_commit, unchanged=unchanged)
        return AppendInfo(
            first_offset=int(bases[0]),
            last_offset=int(last_offsets[-1]),
            max_timestamp=int(max_timestamps.max()),
            log_append_time=append_time,
            batches=len(bases),
            records=int(scan.record_count.sum()),
            size=len(buf),
        )

    def _add_batches(self, buf, scan, first_offsets, last_offsets, max_timestamps, epoch_starts, *,
                     producers: bool, write: bool, group_commit: bool = False,
                     unchanged: Callable[[], bool] | None = None) -> None:
        """The end both appends share, once every batch of ``buf`` is checked
        and carries its final offsets: roll if due, stage, record producers
        (``producers``: some batch has an id) and new leader epochs, advance
        the log end, and write (applying the flush policy) unless ``write`` is
        False."""
        last_offset = int(last_offsets[-1])
        if self._should_roll(len(buf), int(max_timestamps.max()), last_offset, len(last_offsets)):
            self.roll()
        self.active_segment.stage(buf, scan.position, scan.size, last_offsets, max_timestamps, first_offsets,
                                  unchanged)
        if producers:  # otherwise there is nothing to record but the end offset, set below
            self.producer_state.update_batches(scan, first_offsets, last_offsets, max_timestamps)
        self._assign_epochs(epoch_starts)
        self._log_end_offset = last_offset + 1
        self.producer_state.set_end_offset(self._log_end_offset)
        aborted = []
        if producers and self.producer_state.has_completed:
            markers = np.flatnonzero(scan.attributes & CONTROL_BIT)
            aborted = self._aborted(buf, dict(zip(np.asarray(last_offsets)[markers].tolist(),
                                                  scan.position[markers].tolist())))
        if write:
            self.write(group_commit=group_commit)
        self._index(aborted)

    def _aborted(self, buf, markers: dict[int, int]) -> list[AbortedTxn]:
        """The transactions the append ends (``markers``: each control batch's
        offset -> its position in ``buf``) that its markers abort.  Known before
        the write publishes the new offsets, so that no reader in another worker
        takes the log for one without aborts while they are being indexed."""
        aborted = log_loader.aborts_among(self.producer_state, buf, markers, self._name)
        if aborted:
            self._has_aborts = True
        return aborted

    def _index(self, aborted: list[AbortedTxn]) -> None:
        """Aborts go into the active segment's ``.txnindex`` (where every batch of
        the append went) once their markers are written, as Kafka's append does."""
        for txn in aborted:
            self.active_segment.txn_index.append(txn)

    def _add_one(self, buf, first: int, last: int, max_timestamp: int, leader_epoch: int,
                 producer: tuple[int, int, int, int] | None, *, write: bool, group_commit: bool = False,
                 head: bytearray | None = None, unchanged: Callable[[], bool] | None = None) -> None:
        """``_add_batches`` for a buffer of one batch, in scalars; ``producer``
        its (id, epoch, base sequence, attributes) when it has an id."""
        if self._should_roll(len(buf), max_timestamp, last, 1):
            self.roll()
        self.active_segment.stage_one(buf, first, last, max_timestamp, head=head, unchanged=unchanged)
        if producer is not None:
            producer_id, producer_epoch, base_sequence, attributes = producer
            self.producer_state.apply_batch(producer_id, producer_epoch, base_sequence, first, last, max_timestamp,
                                            attributes)
        self._assign_epochs([(leader_epoch, first)])
        self._log_end_offset = last + 1
        self.producer_state.set_end_offset(self._log_end_offset)
        if write:
            self.write(group_commit=group_commit)

    def _assign_epochs(self, epoch_starts) -> None:
        """Record the leader epochs batches just staged start; a new one is saved
        before they are written, as Kafka's assign flushes.  When that save
        fails (a full disk), the staged batches are forgotten again before the
        error goes up: left staged, the next append's write would put them in
        the file too, under the very offsets that append reuses."""
        if not self._leader_epochs.assign(epoch_starts):
            return
        try:
            self._save_leader_epochs()
        except OSError as exc:
            self.active_segment.discard_staged()
            self._leader_epochs.truncate_from_end(self._written_offset)
            self._reload_producer_state(self._written_offset)
            raise KafkaStorageError(f"{self._name}: saving the leader epochs failed, nothing appended: {exc}") \
                from exc

    def _recompress(self, buf, scan):
        """The batches in the topic's ``compression.type`` codec, and their new
        scan; the same buffer and scan when every batch already is (Kafka
        compares the codec only, not the level).  As Kafka, the sizes are
        checked again: a batch may have grown (``uncompressed``)."""
        codec = self.config.target_codec
        assert codec is not None  # append() recompresses only then
        try:
            converted = recompress_batches(buf, scan.position.tolist(), scan.size.tolist(), scan.attributes.tolist(),
                                           codec, self.config.compression_level)
        except CorruptRecordError as exc:
            raise CorruptBatchError(
                f"{self._name}: cannot recompress to {self.config.compression_type}: {exc}") from None
        if converted is None:
            return buf, scan
        scan = scan_batches(np.frombuffer(converted, np.uint8), verify_crc=False)  # the CRCs were just computed
        append_validation.check_sizes(scan, len(converted), self.config, self._name)
        return converted, scan

    def _should_roll(self, incoming_bytes: int, incoming_max_ts: int, last_offset: int, batches: int) -> bool:
        seg = self.active_segment
        if seg.is_empty():
            return False
        if seg.staged_size + incoming_bytes > self.config.segment_bytes:
            return True
        if seg.indexes_full(extra_entries=batches):
            return True
        if last_offset - seg.base_offset > _INT32_MAX:
            return True
        roll_after = self.config.segment_ms - self.config.segment_jitter_ms
        if seg.first_batch_timestamp >= 0:
            return incoming_max_ts - seg.first_batch_timestamp > roll_after
        return now_ms() - seg.created_ms > roll_after

    def write(self, group_commit: bool = False) -> None:
        """Write staged batches to the file; then apply ``flush.messages``:
        at once, or with ``group_commit`` (and an owner that batches, see
        ``group_flush``) in one fsync with the other writes of its owner's
        turn, the batches held back from consumers until it is done."""
        if group_commit and self.group_flush is not None:
            if self._log_end_offset - max(self._flushed_offset, self._flush_owed_to) < self.config.flush_messages:
                self._write_staged()  # no fsync owed yet (what is owed already is on its way)
                return
            # held back before the write publishes the new end: no reader in
            # another worker may see these batches before they are on disk
            self._owed_flushes.append((self._written_offset, self._log_end_offset))
            try:
                self._write_staged()
            except KafkaStorageError:
                self._owed_flushes.pop()
                raise
            if not self._group_flush_asked:
                self._group_flush_asked = True
                self.group_flush(self)
            return
        self._write_staged()
        if self._written_offset - self._flushed_offset >= self.config.flush_messages:
            self.flush()

    def flush_owed(self) -> None:
        """The fsync the writes ``group_flush`` was asked about wait for, all of
        them at once (KafkaStorageError when it fails: ``flush_failure``, and
        the next ``tick`` tries again)."""
        self._group_flush_asked = False
        if self._flush_owed_to > self._flushed_offset:
            self.flush(self._flush_owed_to)

    @property
    def _flush_owed_to(self) -> int:
        """Where the owed fsync must reach: the end of the newest owed write
        (the flushed offset when none is owed)."""
        return self._owed_flushes[-1][1] if self._owed_flushes else self._flushed_offset

    def owes_flush(self, end_offset: int) -> bool:
        """Whether the batches ending before ``end_offset`` wait for a
        ``flush.messages`` fsync that has not happened yet (``group_commit``):
        an answer saying they are stored waits for it too."""
        return self._flushed_offset < end_offset <= self._flush_owed_to

    def flush_failed(self, end_offset: int) -> bool:
        """Whether the fsync the batches ending before ``end_offset`` wait for
        was tried and failed (a later one may still succeed: ``tick``)."""
        return self.flush_failure is not None and self.owes_flush(end_offset) and end_offset <= self._failed_to

    def _write_staged(self) -> None:
        try:
            self.active_segment.write()
        except OSError as exc:
            self._log_end_offset = self._written_offset
            # The staged batches were recorded as appended: forget them again.
            self._reload_producer_state(self._written_offset)
            raise KafkaStorageError(f"{self._name}: write failed, nothing appended: {exc}") from exc
        if self._written_offset != self._log_end_offset:
            self._written_offset = self._log_end_offset
            self._offsets_changed()

    def _offsets_changed(self) -> None:
        if self.on_offsets_changed is not None:
            self.on_offsets_changed()

    def _reload_producer_state(self, offset: int, now: int | None = None) -> None:
        """The log now ends at ``offset`` (its segments already cut there): make
        the producer state cover exactly [log start, offset)."""
        start = self.producer_state.truncate_to(offset, self.log_start_offset, now)
        if start < offset:
            log_loader.replay_producer_state(self.producer_state, self._segments, start)  # as on open
        self.producer_state.set_end_offset(offset)

    def give_back_idle_space(self) -> None:
        """The active segment's reserved space, if nothing was appended since the last call."""
        self.active_segment.give_back_if_idle()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset."""
        old = self.active_segment
        if old.is_empty():
            return old
        self.write()
        old.release_reserved()
        old.seal_time_index()
        try:
            old.write_index_entries()  # whole on disk now for readers of the files
        except OSError as exc:  # the flush this roll asks for writes them again
            log.warning("%s: could not write the index entries of segment %d: %s", self._name, old.base_offset, exc)
        segment = self._new_segment(self._log_end_offset, now_ms())
        with self._lock:
            self._set_segments(self._segments + (segment,))
        # Not fsynced here, on the append path (Kafka moved it off after
        # KAFKA-15046): the flush this roll asks for does it; a snapshot lost
        # to a power cut only means replaying from an older one.
        self._unsynced_snapshot = log_loader.take_snapshot(self.producer_state, self._name, segment.base_offset,
                                                           sync=False)
        self._flush_requested_to = max(self._flush_requested_to, segment.base_offset)
        log.info("%s: rolled to segment %d", self._name, segment.base_offset)
        return segment

    # --- flushing and periodic work -----------------------------------------------
    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in [flushed, up_to) (default:
        everything written) and advance the recovery point.  A background
        flush under way is waited for first."""
        self._settle_flush_job()
        target, segments, snapshot = self._flush_plan(up_to)
        try:
            background_io.fsync_all(self._name, segments, snapshot)
        except OSError as exc:
            raise self._fsync_failed(target, exc) from exc
        self._flushed_to(target)

    def _flush_in_background(self, up_to: int | None) -> None:
        """Hand what ``flush(up_to)`` would fsync to ``self.storage_io``; the
        flushed offset moves when ``tick()`` sees it done."""
        assert self.storage_io is not None
        target, segments, snapshot = self._flush_plan(up_to)
        if target > self._flushed_offset or snapshot is not None:
            self._flush_job = background_io.start(self.storage_io, self._name, target, segments, snapshot)

    def _flush_plan(self, up_to: int | None) -> tuple[int, tuple[LogSegment, ...], str | None]:
        """What a flush up to ``up_to`` covers, with the staged batches written
        first: its target offset, the segments to fsync (none when the target
        is already flushed) and the producer snapshot a roll left unsynced."""
        self._write_staged()
        target = self._written_offset if up_to is None else min(up_to, self._written_offset)
        snapshot, self._unsynced_snapshot = self._unsynced_snapshot, None
        segments = self._segments_overlapping(self._flushed_offset, target) if target > self._flushed_offset else ()
        return target, segments, snapshot

    def _fsync_failed(self, target: int, exc: OSError) -> KafkaStorageError:
        """The storage error of a flush up to ``target`` that failed, kept for
        the answers waiting for it (``flush_failed``)."""
        self.flush_failure = KafkaStorageError(f"{self._name}: fsync failed: {exc}")
        self._failed_to = target
        return self.flush_failure

    def _flushed_to(self, target: int) -> None:
        self.flush_failure = None
        if target > self._flushed_offset:
            self._flushed_offset = target
            self._last_flush_ms = now_ms()
        owed = self._owed_flushes
        if owed and owed[0][1] <= self._flushed_offset:
            while owed and owed[0][1] <= self._flushed_offset:
                owed.popleft()
            self._offsets_changed()  # the high watermark moves past what is on disk now

    def _finish_flush_job(self) -> None:
        job, self._flush_job = self._flush_job, None
        assert job is not None
        try:
            job.future.result()
        except OSError as exc:
            raise self._fsync_failed(job.target, exc) from exc
        self._flushed_to(job.target)


    def _settle_flush_job(self) -> None:
        """Wait for a background flush under way (its segments may be about to change or close)."""
        if self._flush_job is not None:
            self._flush_job.future.exception()  # waits; the outcome is read by the finish
            self._finish_flush_job()

    def tick(self, now: int | None = None) -> None:
        """Periodic work: the time flush policy, the flush a roll asked for,
        unlinking segments whose delete delay has passed, and forgetting idle
        producers (every ``producer.id.expiration.check.interval.ms``)."""
        now = now_ms() if now is None else now
        if now - self._last_producer_expiry_ms >= self.config.producer_id_expiration_check_interval_ms:
            self._last_producer_expiry_ms = now
            self.producer_state.remove_expired(now)
        if self._flush_owed_to > self._flushed_offset and not self._group_flush_asked and self.group_flush:
            self._group_flush_asked = True  # a group commit whose fsync failed: again, by whoever gathers them
            self.group_flush(self)
        if self._flush_job is not None:
            if not self._flush_job.future.done():
                return  # its segments stay open and undeleted until it ends
            self._finish_flush_job()
        flush = self.flush if self.storage_io is None else self._flush_in_background
        if self._flush_requested_to > self._flushed_offset:
            flush(self._flush_requested_to)
        elif self._written_offset > self._flushed_offset and now - self._last_flush_ms >= self.config.flush_ms:
            flush(None)
        if self._flush_job is None and self._pending_deletes and self._pending_deletes[0][0] <= now:
            with self._lock:
                due = [s for t, s in self._pending_deletes if t <= now]
                self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
            self._off_the_loop(background_io.unlink_segments, self._name, due)

    def _segments_overlapping(self, start: int, end: int) -> tuple[LogSegment, ...]:
        """Segments holding any offset in [start, end)."""
        segs = self._segments
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        return segs[first : bisect.bisect_left(self._bases, end)]

    # --- reading -------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one: bool = True) -> ReadSlice | None:
        """Whole batches from the one holding ``offset``, from a single segment,
        at most ``max_bytes`` (but at least one batch when ``min_one``), none at
        or beyond ``max_offset`` (default: the written offset).  None when there
        is nothing yet at ``offset``; OffsetOutOfRangeError outside
        [log start, written offset]."""
        segments, bases = self._segments, self._bases  # one snapshot for the whole read
        end = self._written_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, end)
        limit = end if max_offset is None else min(max_offset, end)
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        for segment in segments[i:]:
            if segment.base_offset >= limit:
                return None
            found = segment.read(offset, max_bytes, limit, min_one)
            if found is not None:
                return ReadSlice(segment, found[0], found[1], max(offset, segment.base_offset))
        return None

    def read_records(self, offset: int, max_bytes: int = 1 << 20, **kwargs) -> bytes:
        found = self.read(offset, max_bytes, **kwargs)
        return found.tobytes() if found else b""

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start
        whose timestamp is >= ``timestamp`` (Kafka's ListOffsets), or None."""
        for segment in self._segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self.log_start_offset:
                continue
            start = self.log_start_offset
            # A batch whose max timestamp reaches it may hold no record that does
            # at or after the log start (the log start inside the batch, the
            # timestamps not in order): then the batches after it are looked at.
            while (found := segment.find_batch_by_timestamp(timestamp, start)) is not None:
                data = segment.read_bytes(found.position, found.size)
                for record in batch_format.decode_batch(data).records:
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
                start = found.last_offset + 1
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the record with the largest timestamp (ListOffsets -3)."""
        best = max((s for s in self._segments if s.size), key=lambda s: s.max_timestamp, default=None)
        if best is None or best.max_timestamp < 0:
            return None
        found = best.find_batch(best.offset_of_max_timestamp)
        assert found is not None  # the segment holds that offset
        records = batch_format.decode_batch(best.read_bytes(found.position, found.size)).records
        top = max(records, key=lambda r: r.timestamp)
        return top.offset, top.timestamp

    # --- deleting ------------------------------------------------------------
    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply ``retention.ms`` and ``retention.bytes`` (and the log start
        offset), deleting whole segments from the oldest, never the active one.
        Returns how many segments went."""
        if "delete" not in self.config.cleanup_policy:
            return self._delete_below_log_start()
        now = now_ms() if now is None else now
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        excess = self.size_in_bytes() - retention_bytes if retention_bytes >= 0 else 0

        def expired(segment: LogSegment, freed: int) -> bool:
            if segment.next_offset <= self.log_start_offset:
                return True
            if retention_ms >= 0 and now - largest_timestamp(segment) > retention_ms:
                return True
            return excess - freed >= segment.size > 0

        return self._delete_prefix(expired)

    def _delete_prefix(self, predicate) -> int:
        with self._lock:  # the cleaner may swap segments meanwhile
            doomed, freed = [], 0
            for segment in self._segments[:-1]:
                if not predicate(segment, freed):
                    break
                doomed.append(segment)
                freed += segment.size
            if not doomed:
                return 0
            remaining = self._segments[len(doomed):]
            self._set_segments(remaining)
            self._advance_log_start(remaining[0].base_offset)
            due = now_ms() + self.config.file_delete_delay_ms
            for segment in doomed:
                segment.mark_deleted()
                self._pending_deletes.append((due, segment))
                log.info("%s: deleting segment %d (%d bytes)", self._name, segment.base_offset, segment.size)
        self.producer_state.delete_snapshots_below(remaining[0].base_offset)
        return len(doomed)

    # --- replication ---------------------------------------------------------
    # A follower's log takes the leader's batches as they are, cuts a tail its
    # leader does not have, and drops what its leader deleted.

    def append_as_follower(self, records) -> int:
        """Append the leader's batches keeping their offsets, leader epochs and
        timestamps; a batch cut off at the end of a fetch response is left for
        the next fetch.  Returns the new log end.  A writable buffer (the
        fetch response's own, as the replica fetcher passes) is written as it
        is, not copied: nothing here changes its bytes."""
        buf = records if _writable(records) else bytearray(records)
        if self._follow_few(buf):
            return self._log_end_offset
        return self._follow_scanned(buf)

    def _follow_few(self, buf) -> bool:
        """``append_as_follower`` for a response of up to ``_FEW_BATCHES`` whole,
        valid v2 batches continuing the log end, in scalars: what a follower at
        the tail gets, a batch or a few per fetch (the scanned path's numpy
        setup costs several times what this does for two).  False for anything
        else, which the scanned path then decides.  A property test holds the
        two to the same log."""
        size = len(buf)
        view = memoryview(buf)
        batches = []
        pos, next_offset, newest = 0, self._log_end_offset, -1
        while pos < size:
            if size - pos < layout.BATCH_HEADER_SIZE or len(batches) == _FEW_BATCHES:
                return False
            (first, length, leader_epoch, magic, crc, attributes, last_delta, _base_ts, max_timestamp, producer_id,
             producer_epoch, base_sequence, _count) = _BATCH_HEADER.unpack_from(buf, pos)
            end = pos + length + layout.LOG_OVERHEAD
            if (end > size or end < pos + layout.BATCH_HEADER_SIZE or magic != 2 or first != next_offset
                    or crc32c(view[pos + layout.CRC_START:end]) != crc):
                return False
            producer = (producer_id, producer_epoch, base_sequence, attributes) if producer_id >= 0 else None
            batches.append((pos, end, first, first + last_delta, max_timestamp, leader_epoch, producer))
            next_offset, newest = first + last_delta + 1, max(newest, max_timestamp)
            pos = end
        if not batches:
            return False
        # as _add_batches: one roll decision for the whole response, then each batch staged
        if self._should_roll(size, newest, next_offset - 1, len(batches)):
            self.roll()
        segment, producers = self.active_segment, self.producer_state
        markers = {}  # a control batch's offset -> its position (transaction markers)
        for start, end, first, last, max_timestamp, leader_epoch, producer in batches:
            segment.stage_one(view[start:end], first, last, max_timestamp)
            if producer is not None:
                producers.apply_batch(producer[0], producer[1], producer[2], first, last, max_timestamp, producer[3])
                if producer[3] & CONTROL_BIT:
                    markers[last] = start
            self._assign_epochs([(leader_epoch, first)])
        self._log_end_offset = next_offset
        producers.set_end_offset(next_offset)
        aborted = self._aborted(buf, markers) if markers else []
        self.write()
        self._index(aborted)
        return True

    def _follow_scanned(self, buf) -> int:
        scan = scan_batches(np.frombuffer(buf, np.uint8))
        if scan.stop not in (STOP_END, STOP_TORN):
            raise CorruptBatchError(f"{self._name}: the leader's batch at byte {scan.valid_end} is invalid "
                                    f"(scan stop code {scan.stop})")
        if len(scan.position) == 0:
            return self._log_end_offset
        buf = memoryview(buf)[:scan.valid_end]  # the torn batch at the end waits for the next fetch
        if (scan.magic != 2).any():
            raise UnsupportedFormatError(f"{self._name}: only record batch v2 (magic 2) can be replicated")
        if int(scan.base_offset[0]) != self._log_end_offset:
            raise OffsetOutOfRangeError(int(scan.base_offset[0]), self.log_start_offset, self._log_end_offset)
        epoch_starts = zip(scan.partition_leader_epoch.tolist(), scan.base_offset.tolist())
        self._add_batches(buf, scan, scan.base_offset, scan.last_offset, scan.max_timestamp, epoch_starts,
                          producers=bool(scan.producer_id.max() >= 0), write=True)
        return self._log_end_offset

    def follow_leader_log_start(self, leader_log_start: int) -> int:
        """Move the log start up to the leader's (a fetch response's
        ``log_start_offset``; Kafka's ``maybeIncrementLogStartOffset``), so
        what the leader deleted (retention, DeleteRecords) goes here too:
        whole segments below it at once, as ``delete_records_before`` does.
        Never past this replica's own high watermark (set from the same
        response first), never backwards (this log's retention may have run
        ahead of the leader's).  Returns the log start offset."""
        self._advance_log_start(min(leader_log_start, self.high_watermark))
        self._delete_below_log_start()
        return self.log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Cut everything at and after ``offset`` (a whole batch when ``offset``
        falls inside one): what a follower does with a tail its new leader
        never had.  Leader epochs and producer state follow the new end; a
        cleaning pass in progress is waited for, since it may be about to swap
        a segment that is going."""
        self._write_staged()
        if offset >= self._log_end_offset:
            return
        self._settle_flush_job()  # before the flushed offset may go down with the end
        if offset < self.log_start_offset:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self._log_end_offset)
        with self._clean_lock, self._lock:
            kept = tuple(s for s in self._segments if s.base_offset < offset) or self._segments[:1]
            doomed = self._segments[len(kept):]
            due = now_ms() + self.config.file_delete_delay_ms
            for segment in doomed:
                segment.mark_deleted()
                self._pending_deletes.append((due, segment))
            self._set_segments(kept)
            self.active_segment.truncate_to(offset)
            end = self.active_segment.next_offset
            log.info("%s: truncated from %d to %d", self._name, self._log_end_offset, end)
            self._log_end_offset = self._written_offset = end
            self._flushed_offset = min(self._flushed_offset, end)
            self._flush_requested_to = min(self._flush_requested_to, end)
            while self._owed_flushes and self._owed_flushes[-1][1] > end:  # what is cut needs no fsync
                start, _ = self._owed_flushes.pop()
                if start < end:
                    self._owed_flushes.append((start, end))
                    break
            self.cleaner_checkpoint = min(self.cleaner_checkpoint, end)
            if self._high_watermark is not None:
                self._high_watermark = min(self._high_watermark, end)
        if self._leader_epochs.truncate_from_end(end):
            self._save_leader_epochs()
        self._reload_producer_state(end)
        self._offsets_changed()

    # --- compaction ----------------------------------------------------------
    # What the cleaner (``cleaner.py``) needs of a log.  A pass reads only
    # inactive segments, which never change, and takes the log's lock only to
    # swap a cleaned segment in: appends never wait for it except when they roll.

    @contextlib.contextmanager
    def cleaning(self):
        """One cleaning pass at a time: yields whether this caller has the turn
        (it never waits for it); the turn ends with the ``with`` block."""
        acquired = self._clean_lock.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                self._clean_lock.release()

    def replace_segments(self, old: list, new: LogSegment) -> bool:
        """Swap ``new`` (its files named ``.swap``) in for the consecutive
        segments ``old``: list first, then the old files become ``.deleted``,
        then the new ones take their plain names.  False (nothing changed) when
        ``old`` is no longer in the log or the log was closed."""
        with self._lock:
            segments = self._segments
            first = next((i for i, s in enumerate(segments) if s is old[0]), -1)
            if (self._closed or first < 0 or segments[first : first + len(old)] != tuple(old)
                    or first + len(old) >= len(segments)):
                return False
            self._set_segments(segments[:first] + (new,) + segments[first + len(old):])
            due = now_ms() + self.config.file_delete_delay_ms
            for segment in old:
                segment.mark_deleted()
                self._pending_deletes.append((due, segment))
            new.change_suffix("")
        checkpoints.fsync_dir(self.directory)
        log.info("%s: cleaned segments %s into %d", self._name, [s.base_offset for s in old], new.base_offset)
        return True

    def mark_cleaned(self, end_offset: int, latest_delete_horizon: int) -> None:
        """A pass compacted everything below ``end_offset`` (the new cleaner
        checkpoint) and kept tombstones up to ``latest_delete_horizon``."""
        self.cleaner_checkpoint = end_offset
        self.latest_delete_horizon = latest_delete_horizon

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset``
        (at most the written offset) and drop the segments wholly below it."""
        if offset > self._written_offset or offset < 0:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self._written_offset)
        self._advance_log_start(offset)
        self._delete_below_log_start()
        return self.log_start_offset

    def _delete_below_log_start(self) -> int:
        return self._delete_prefix(lambda seg, _: seg.next_offset <= self.log_start_offset)

    def _advance_log_start(self, offset: int) -> None:
        # Nothing below the log start is ever read or recovered again, so the
        # recovery point may not lag behind it (keeps the offsets ordered).
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._flushed_offset = max(self._flushed_offset, offset)
            self._offsets_changed()

    # --- leader epochs -------------------------------------------------------
    def _save_leader_epochs(self) -> None:
        leader_epochs.write(os.path.join(self.directory, filenames.LEADER_EPOCH_CHECKPOINT), self._leader_epochs)

    @property
    def leader_epochs(self) -> list[tuple[int, int]]:
        """``[(epoch, start_offset), ...]``, oldest first (see ``leader_epochs.py``)."""
        return self._leader_epochs.entries

    def end_offset_for_epoch(self, requested: int, current_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch as Kafka's leader
        epoch cache does: the largest known epoch <= ``requested`` and the start
        of the next epoch (the log end for the latest one), or (-1, -1) for an
        epoch newer than any known.  A leader holds its ``current_epoch`` from
        the log end on even before it appends in it."""
        return self._leader_epochs.end_offset_for(requested, current_epoch, self.written_offset)

    # --- closing -------------------------------------------------------------
    def close(self) -> None:
        """Write and fsync everything, then close every file."""
        self._write_staged()
        self.active_segment.seal_time_index()
        self.flush()
        self.active_segment.flush()  # the sealing entry, even when no data was pending
        self._close_files()

    def release(self) -> None:
        """Close every file for another process to open the log where this one
        leaves it (a partition moving between workers): written, but fsynced
        only as far as ``flushed_offset`` says, the page cache being the
        same for both.  Writes a group commit still owes its fsync are synced
        first: their answers wait on that fsync, wherever they are asked."""
        self._write_staged()
        self._settle_flush_job()  # a roll's fsync under way uses the segments' descriptors
        if self._flush_owed_to > self._flushed_offset:
            self.flush(self._flush_owed_to)
        for segment in self._segments:  # a failure here leaves the log open, and still this worker's
            segment.write_index_entries()
        self._close_files()

    def _close_files(self) -> None:
        # the producers' state at the end: whoever opens the log next replays nothing
        log_loader.take_snapshot(self.producer_state, self._name, self._log_end_offset)
        with self._lock:
            self._closed = True
            pending, self._pending_deletes = self._pending_deletes, []
        for _, segment in pending:
            segment.close_and_unlink()
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Remove the whole partition directory (DeleteTopics)."""
        try:
            self._settle_flush_job()
        except KafkaStorageError:
            pass  # its files are going anyway
        with self._lock:
            self._closed = True
        for segment in self._segments:
            segment.close()
        for _due, segment in self._pending_deletes:  # retention or compaction leftovers: their files go below
            segment.close()
        self._pending_deletes.clear()
        parent = os.path.dirname(self.directory)
        doomed = os.path.join(parent, filenames.delete_dir_name(self.topic, self.partition))
        os.rename(self.directory, doomed)
        # gigabytes of files take the kernel seconds; a start removes what a crash left
        self._off_the_loop(shutil.rmtree, doomed, ignore_errors=True)

    def _off_the_loop(self, work, *args, **kwargs) -> None:
        """``work`` on ``storage_io``, after anything handed to it before (one
        thread, in order); inline without one."""
        if self.storage_io is None:
            work(*args, **kwargs)
        else:
            self.storage_io.submit(work, *args, **kwargs)


def largest_timestamp(segment: LogSegment) -> int:
    """A segment's largest record timestamp; its file's mtime when no record
    carries one (as Kafka falls back to)."""
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return os.stat(segment.log_path).st_mtime_ns // 1_000_000
