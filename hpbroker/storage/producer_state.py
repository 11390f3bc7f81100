"""Idempotent-producer state of one partition, and its ``.snapshot`` files.

Per producer id the partition keeps the current epoch and the metadata of the
last 5 batches appended (Kafka's ``NUM_BATCHES_TO_RETAIN``), so that a retried
batch is recognised and answered with its original offsets instead of being
appended twice.  ``check`` decides what to do with an incoming batch;
``update`` records one once it is in the log.  The state is derived data: it
is rebuilt by replaying the log from the newest usable snapshot.

Snapshot file ``<partition dir>/%020d.snapshot``, named by the offset it was
taken at (every batch below it applied, none at or above).  Kafka's
``ProducerSnapshot`` message, version 1, non-flexible, big-endian::

    header (10 bytes)
     0 version          int16    1
     2 crc              uint32   CRC-32C of bytes [6, end): count and entries
     6 count            int32    number of entries
    entry (46 bytes each)
     0 producerId            int64
     8 epoch                 int16
    10 lastSequence          int32   -1 when no batch is known
    14 lastOffset            int64   last offset of the last batch, -1 if none
    22 offsetDelta           int32   lastOffset - firstOffset of that batch
    26 timestamp             int64   the producer's last timestamp
    34 coordinatorEpoch      int32   -1 until a transaction marker is seen
    38 currentTxnFirstOffset int64   -1 when no transaction is open

Checked against Apache Kafka's sources (``ProducerSnapshot.json``,
``ProducerStateManager.readSnapshot/writeSnapshot``): the field order and
types, the CRC range starting at byte 6 (so the entry count is covered), and
that only the *last* batch of each producer is stored, so after a reload a
retry of an older batch is no longer recognised (as in Kafka).  Entry order is
not significant (Kafka writes hash-map order; we sort by producer id).  A file
that is short, long, of another version or with a bad CRC is logged, deleted
and the next older one tried (Kafka deletes it too); with none left the log
is replayed from its start.  Files are written to ``<name>.tmp``, fsynced and
renamed, so a crash leaves the old file or the new one.
"""

import bisect
import logging
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from hpbroker.errors import ErrorCode
from hpbroker.kernels import crc32c
from hpbroker.kernels.layout import CONTROL_BIT, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, TRANSACTIONAL_BIT
from hpbroker.storage import filenames
from hpbroker.storage.checkpoints import fsync_dir

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
# producer.id.expiration.ms (KIP-854; before Kafka 3.4, transactional.id.expiration.ms played this role).
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOT_VERSION = 1

_INT32_MAX = (1 << 31) - 1

# Header layout, chained as Kafka declares it.
VERSION_OFFSET = 0
CRC_OFFSET = VERSION_OFFSET + 2
COUNT_OFFSET = CRC_OFFSET + 4
ENTRIES_OFFSET = COUNT_OFFSET + 4
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
HEADER_SIZE = _HEADER.size  # 10
ENTRY_SIZE = _ENTRY.size  # 46


class CorruptSnapshotError(ValueError):
    """A snapshot file cannot be trusted (short, unknown version, bad CRC)."""


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping from Int32.MAX to 0 as producers do."""
    return (sequence + increment) & _INT32_MAX


def decrement_sequence(sequence: int, decrement: int) -> int:
    return (sequence - decrement) & _INT32_MAX


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp (the append time under LogAppendTime)


class CompletedTxn(NamedTuple):
    """A transaction a COMMIT or ABORT marker ended."""
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    last_stable_offset: int  # the LSO with it: another open transaction's first offset, else the marker's + 1


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
            self.current_txn_first_offset, deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
        )

    def _bump_epoch(self, epoch: int) -> None:
        # Sequences restart with each epoch, so the old epoch's batches can match nothing.
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata, transactional: bool = False) -> None:
        self._bump_epoch(epoch)
        self.batches.append(batch)  # maxlen drops the oldest
        self.last_timestamp = batch.timestamp
        if transactional and self.current_txn_first_offset < 0:
            self.current_txn_first_offset = batch.first_offset

    def end_txn(self, epoch: int, coordinator_epoch: int | None, timestamp: int) -> None:
        self._bump_epoch(epoch)
        if coordinator_epoch is not None:
            self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = -1
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class Verdict(Enum):
    OK = "ok"  # append it
    DUPLICATE = "duplicate"  # already in the log: answer NONE with the original offsets
    OUT_OF_ORDER_SEQUENCE_NUMBER = "out_of_order"
    INVALID_PRODUCER_EPOCH = "invalid_epoch"
    INVALID_TXN_STATE = "invalid_txn_state"  # a plain batch while the producer's transaction is open here


# The Kafka error a produce answer carries for each verdict.
_ERROR_CODES = {
    Verdict.OK: ErrorCode.none,
    Verdict.DUPLICATE: ErrorCode.none,
    Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode.out_of_order_sequence_number,
    Verdict.INVALID_PRODUCER_EPOCH: ErrorCode.invalid_producer_epoch,
    Verdict.INVALID_TXN_STATE: ErrorCode.invalid_txn_state,
}


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdict: Verdict
    first_offset: int = -1  # DUPLICATE only: what the original append answered
    last_offset: int = -1
    log_append_time: int = -1  # DUPLICATE only: the stored timestamp, which Kafka answers as logAppendTime
    message: str = ""

    @property
    def error_code(self) -> ErrorCode:
        return _ERROR_CODES[self.verdict]


_OK = CheckResult(Verdict.OK)


def _check(committed: ProducerStateEntry | None, current: ProducerStateEntry | None,
           producer_id: int, epoch: int, first_seq: int, last_seq: int, transactional: bool = False,
           sequences: bool = True) -> CheckResult:
    """Kafka's duplicate lookup (against the committed state only) followed by
    ``ProducerAppendInfo.checkProducerEpoch`` and ``checkSequence`` (against the
    state including earlier batches of the same request).  Without
    ``sequences`` (the broker's own transactional writes, which carry none)
    only the epoch is checked."""
    if committed is not None and sequences:
        duplicate = committed.find_duplicate(epoch, first_seq, last_seq)
        if duplicate is not None:
            return CheckResult(Verdict.DUPLICATE, duplicate.first_offset, duplicate.last_offset, duplicate.timestamp)
    known_epoch = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
    if epoch < known_epoch:
        return CheckResult(Verdict.INVALID_PRODUCER_EPOCH,
                           message=f"producer {producer_id}: epoch {epoch} is older than {known_epoch}")
    if not transactional and current is not None and current.current_txn_first_offset >= 0:
        return CheckResult(Verdict.INVALID_TXN_STATE,
                           message=f"producer {producer_id}: a non-transactional batch while its transaction "
                                   f"from offset {current.current_txn_first_offset} is open")
    if not sequences:
        return _OK
    if epoch != known_epoch:
        # A bumped epoch restarts at 0.  With no state at all any sequence is
        # accepted: since KIP-360 (Kafka 2.5) the broker no longer answers
        # UNKNOWN_PRODUCER_ID (59) for a producer whose state was lost to
        # retention or expiry; ProducerAppendInfo accepts and starts tracking.
        if first_seq != 0 and known_epoch != NO_PRODUCER_EPOCH:
            return CheckResult(Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER,
                               message=f"producer {producer_id}: new epoch {epoch} must start at sequence 0, "
                                       f"not {first_seq}")
        return _OK
    if current is None or known_epoch == NO_PRODUCER_EPOCH or _in_sequence(current.last_seq, first_seq):
        return _OK
    return CheckResult(Verdict.OUT_OF_ORDER_SEQUENCE_NUMBER,
                       message=f"producer {producer_id}: sequence {first_seq} does not follow {current.last_seq}")


def _rows(columns):
    """Per-batch tuples from batch-scan columns (``BatchScan`` or anything with
    the same column attributes), or from an iterable of such column sets."""
    if not hasattr(columns, "producer_id"):
        for part in columns:
            yield from _rows(part)
        return
    yield from zip(
        _as_list(columns.producer_id), _as_list(columns.producer_epoch), _as_list(columns.base_sequence),
        _as_list(columns.base_offset), _as_list(columns.last_offset), _as_list(columns.max_timestamp),
        _as_list(columns.attributes),
    )


def _as_list(column) -> list:
    return column.tolist() if hasattr(column, "tolist") else list(column)


class ProducerStateManager:
    """Producer state of one partition; not thread-safe (one writer per partition).

    ``end_offset`` is the offset the in-memory state covers up to (exclusive),
    Kafka's ``mapEndOffset``: ``update`` and replay move it forward, the log
    sets it with ``set_end_offset`` for appends that carry no producer id.
    """

    def __init__(self, partition_dir: str, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS):
        self.partition_dir = partition_dir
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.end_offset = 0
        self._producers: dict[int, ProducerStateEntry] = {}
        # transactions (Kafka's ongoingTxns / unreplicatedTxns): producer id -> first offset of
        # its open one; those ended by a marker the high watermark has not passed yet; and
        # those ended by the last append or replay, for the log to index (aborts) and take
        self._ongoing: dict[int, int] = {}
        self._unreplicated: list[CompletedTxn] = []
        self._completed: list[CompletedTxn] = []

    # --- the append path ---------------------------------------------------------
    def check(self, producer_id: int, epoch: int, base_sequence: int, record_count: int,
              transactional: bool = False) -> CheckResult:
        """What to do with one incoming data batch (see ``Verdict``)."""
        if producer_id == NO_PRODUCER_ID:
            return _OK  # not idempotent: nothing to check, nothing tracked
        entry = self._producers.get(producer_id)
        last_seq = increment_sequence(base_sequence, record_count - 1)
        return _check(entry, entry, producer_id, epoch, base_sequence, last_seq, transactional)

    def check_batches(self, columns, sequences: bool = True) -> CheckResult:
        """``check`` for every batch of one produce request, in order, each seeing
        the ones before it as appended (a producer may send consecutive batches
        together).  The first duplicate or error answers for the whole request,
        as in Kafka's ``analyzeAndValidateProducerState``.  Of a control batch
        (which clients cannot send) only the epoch is checked.  ``sequences=False``: the broker's
        own transactional writes (offsets committed in a transaction), whose
        epoch is checked and nothing else."""
        pending: dict[int, ProducerStateEntry] = {}
        for pid, epoch, seq, base, last, max_ts, attrs in _rows(columns):
            if pid == NO_PRODUCER_ID:
                continue
            committed = self._producers.get(pid)
            if attrs & CONTROL_BIT:  # a marker (only the broker's own): of the producer's epoch or a later one
                known = pending.get(pid, committed)
                if known is not None and epoch < known.producer_epoch:
                    return CheckResult(Verdict.INVALID_PRODUCER_EPOCH, message=f"producer {pid}: a marker of "
                                       f"epoch {epoch}, older than {known.producer_epoch}")
                continue
            current = pending.get(pid, committed)
            last_seq = increment_sequence(seq, last - base)
            transactional = bool(attrs & TRANSACTIONAL_BIT)
            result = _check(committed, current, pid, epoch, seq, last_seq, transactional, sequences)
            if result.verdict is not Verdict.OK:
                return result
            nxt = current.copy() if current is not None else ProducerStateEntry(pid)
            nxt.add_batch(epoch, BatchMetadata(seq, last_seq, base, last, max_ts), transactional)
            pending[pid] = nxt
        return _OK

    def check_one(self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int) -> CheckResult:
        """``check_batches`` for a request of one data batch, from its header's fields."""
        committed = self._producers.get(producer_id)
        return _check(committed, committed, producer_id, epoch, base_sequence,
                      increment_sequence(base_sequence, last_offset_delta))

    def update(self, producer_id: int, epoch: int, base_sequence: int, last_sequence: int,
               first_offset: int, last_offset: int, max_timestamp: int, *, transactional: bool = False) -> None:
        """Record a data batch now in the log (with its assigned offsets)."""
        if producer_id != NO_PRODUCER_ID:
            entry = self._producers.get(producer_id)
            if entry is None:
                entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
            entry.add_batch(epoch,
                            BatchMetadata(base_sequence, last_sequence, first_offset, last_offset, max_timestamp),
                            transactional)
            if transactional and producer_id not in self._ongoing:
                self._ongoing[producer_id] = entry.current_txn_first_offset  # its first batch opened one
        self.end_offset = max(self.end_offset, last_offset + 1)

    def update_batches(self, columns, first_offsets, last_offsets, max_timestamps) -> None:
        """``update`` for every batch of one append: ``columns`` is the request's
        scan, the three arrays what the log assigned (row for row)."""
        rows = zip(_rows(columns), _as_list(first_offsets), _as_list(last_offsets), _as_list(max_timestamps))
        for (pid, epoch, seq, _, _, _, attrs), first, last, max_ts in rows:
            self._apply(pid, epoch, seq, first, last, max_ts, attrs)

    def end_txn(self, producer_id: int, epoch: int, coordinator_epoch: int | None, timestamp: int, offset: int) -> None:
        """A COMMIT/ABORT marker at ``offset`` closed the producer's transaction
        (if one was open: a marker without one changes nothing but the epoch)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        first = self._ongoing.pop(producer_id, -1)
        if first >= 0:
            # the LSO an abort is indexed with: the earliest transaction still open
            # (another producer's), else just after this marker
            done = CompletedTxn(producer_id, first, offset, min(self._ongoing.values(), default=offset + 1))
            self._unreplicated.append(done)
            self._completed.append(done)
        entry.end_txn(epoch, coordinator_epoch, timestamp)
        self.end_offset = max(self.end_offset, offset + 1)

    @property
    def has_completed(self) -> bool:
        return bool(self._completed)

    def take_completed(self) -> list[CompletedTxn]:
        """The transactions ended since the last call, in marker order (the log indexes the aborts)."""
        done, self._completed = self._completed, []
        return done

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset a read_committed consumer may not read past yet: the
        earliest open transaction's first offset, or an ended one's whose marker
        the high watermark has not passed (its outcome is not replicated);
        None when there is none."""
        if not self._unreplicated and not self._ongoing:
            return None  # nearly every partition, on every publish: no transaction at all
        if self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]
        firsts = [t.first_offset for t in self._unreplicated]
        if self._ongoing:
            firsts.append(min(self._ongoing.values()))
        return min(firsts) if firsts else None

    def _transactions_from_entries(self) -> None:
        """After the entries were replaced (a snapshot, a reset): the open
        transactions are theirs; nothing ended is pending."""
        self._ongoing = {pid: e.current_txn_first_offset for pid, e in self._producers.items()
                         if e.current_txn_first_offset >= 0}
        self._unreplicated = []
        self._completed = []

    def apply_batch(self, producer_id: int, epoch: int, base_sequence: int, first_offset: int, last_offset: int,
                    max_timestamp: int, attributes: int) -> None:
        """``update_batches`` for one batch, from its header's fields."""
        self._apply(producer_id, epoch, base_sequence, first_offset, last_offset, max_timestamp, attributes)

    def _apply(self, pid, epoch, seq, first, last, max_ts, attrs) -> None:
        if pid == NO_PRODUCER_ID:
            self.end_offset = max(self.end_offset, last + 1)
        elif attrs & CONTROL_BIT:
            # The coordinator epoch sits in the marker's record value, which a
            # scan does not decode: the transactional path must pass it itself.
            self.end_txn(pid, epoch, None, max_ts, last)
        else:
            self.update(pid, epoch, seq, increment_sequence(seq, last - first), first, last, max_ts,
                        transactional=bool(attrs & TRANSACTIONAL_BIT))

    def set_end_offset(self, offset: int) -> None:
        self.end_offset = offset

    # --- reading the state ----------------------------------------------------
    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self._producers)

    def __len__(self) -> int:
        return len(self._producers)

    # --- rebuilding ------------------------------------------------------------
    def load_from_batches(self, columns, from_offset: int = 0) -> None:
        """Replay batches already in the log (recovery after a snapshot, or a
        follower's appends): no checks, as Kafka's replication origin.  Batches
        ending below ``from_offset`` are skipped."""
        for pid, epoch, seq, base, last, max_ts, attrs in _rows(columns):
            if last >= from_offset:
                self._apply(pid, epoch, seq, base, last, max_ts, attrs)

    def clear(self, end_offset: int = 0) -> None:
        self._producers.clear()
        self._transactions_from_entries()
        self.end_offset = end_offset

    def truncate_to(self, offset: int, log_start_offset: int = 0, now_ms: int | None = None) -> int:
        """The log now ends at ``offset``: drop snapshots above it, reload the
        newest one at or below it, and return the offset the log must replay
        from (up to ``offset``) with ``load_from_batches``.  Returns ``offset``
        itself when the state already ends there (nothing to replay)."""
        if offset == self.end_offset:
            for snap in self.list_snapshots():
                if snap > offset:
                    self._delete_snapshot(snap)
            return offset
        return self.load_latest_snapshot(offset, log_start_offset, now_ms)

    def truncate_fully(self, offset: int) -> None:
        """The whole log went (Kafka's truncateFullyAndStartAt): no state, no snapshots."""
        self.clear(offset)
        for snap in self.list_snapshots():
            self._delete_snapshot(snap)

    # --- expiry ------------------------------------------------------------------
    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        # A producer inside a transaction is kept: its open transaction pins the LSO.
        return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` (judged by
        their last batch's timestamp, as Kafka does); returns their ids."""
        gone = [pid for pid, e in self._producers.items() if self._expired(e, now_ms)]
        for pid in gone:
            del self._producers[pid]
        return gone

    # --- snapshots ----------------------------------------------------------------
    def snapshot_path(self, offset: int) -> str:
        return filenames.segment_file(self.partition_dir, offset, filenames.SNAPSHOT_SUFFIX)

    def list_snapshots(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        try:
            names = os.listdir(self.partition_dir)
        except FileNotFoundError:
            return []
        offsets = []
        for name in names:
            if name.endswith(filenames.SNAPSHOT_SUFFIX):
                try:
                    offsets.append(filenames.base_offset_of(name))
                except ValueError:
                    continue
        return sorted(offsets)

    def take_snapshot(self, offset: int | None = None, *, sync: bool = True) -> str:
        """Write the state as ``<offset>.snapshot`` (default: ``end_offset``).
        ``offset`` must be the log end offset the state covers, e.g. a new
        segment's base offset at a roll; giving it also sets ``end_offset``.
        ``sync=False`` skips the fsyncs (Kafka's roll flushes it later); a file
        lost to a crash then is just a missing snapshot."""
        if offset is not None:
            self.end_offset = offset
        path = self.snapshot_path(self.end_offset)
        data = encode_snapshot(self._producers.values())
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if sync:
            fsync_dir(self.partition_dir)
        return path

    def load_latest_snapshot(self, max_offset: int, log_start_offset: int = 0, now_ms: int | None = None) -> int:
        """Replace the state with the newest readable snapshot at or below
        ``max_offset`` and return its offset: the log replays from there to its
        end.  As Kafka's ``truncateAndReload``: snapshots above ``max_offset``
        (a lost or truncated tail) and below the log start (the batches after
        them are gone, so nothing could be replayed) are deleted; corrupt ones
        are deleted with a warning.  (Kafka also drops one exactly at the log
        start, contrary to its own comment; that one is still a complete
        state, so we keep it.)  Without one the state starts empty at
        ``log_start_offset``.  Producers expired at ``now_ms`` are not loaded."""
        self._producers.clear()
        snaps = self.list_snapshots()
        for snap in snaps:
            if not log_start_offset <= snap <= max_offset:
                self._delete_snapshot(snap)
        usable = [s for s in snaps if log_start_offset <= s <= max_offset]
        for snap in reversed(usable):
            path = self.snapshot_path(snap)
            try:
                with open(path, "rb") as f:
                    entries = decode_snapshot(f.read())
            except (OSError, CorruptSnapshotError) as exc:
                log.warning("%s: ignoring and deleting producer snapshot %s: %s", self.partition_dir, path, exc)
                self._delete_snapshot(snap)
                continue
            for entry in entries:
                if now_ms is None or not self._expired(entry, now_ms):
                    self._producers[entry.producer_id] = entry
            self._transactions_from_entries()
            self.end_offset = snap
            return snap
        self._transactions_from_entries()
        self.end_offset = log_start_offset
        return log_start_offset

    def delete_snapshots_below(self, offset: int, keep_newest: int = 0) -> list[int]:
        """Delete snapshots taken below ``offset`` (e.g. at the base offsets of
        deleted segments), but never the ``keep_newest`` newest of all.  Kafka
        before 2.8 retained the two newest this way (``keep_newest=2``); since
        then a snapshot goes with its segment.  Returns the deleted offsets."""
        snaps = self.list_snapshots()
        protected = set(snaps[-keep_newest:]) if keep_newest > 0 else set()
        doomed = [s for s in snaps if s < offset and s not in protected]
        for snap in doomed:
            self._delete_snapshot(snap)
        return doomed

    def snapshot_at_or_below(self, offset: int) -> int | None:
        snaps = self.list_snapshots()
        i = bisect.bisect_right(snaps, offset)
        return snaps[i - 1] if i else None

    def _delete_snapshot(self, offset: int) -> None:
        try:
            os.unlink(self.snapshot_path(offset))
        except FileNotFoundError:
            pass


# --- the file format ---------------------------------------------------------------

def encode_snapshot(entries) -> bytes:
    """A version-1 snapshot of ``entries`` (ProducerStateEntry), CRC filled in."""
    entries = sorted(entries, key=lambda e: e.producer_id)
    buf = bytearray(HEADER_SIZE + ENTRY_SIZE * len(entries))
    for i, e in enumerate(entries):
        last = e.batches[-1] if e.batches else None
        _ENTRY.pack_into(
            buf, ENTRIES_OFFSET + i * ENTRY_SIZE,
            e.producer_id, e.producer_epoch,
            last.last_seq if last else NO_SEQUENCE,
            last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset,
        )
    struct.pack_into(">i", buf, COUNT_OFFSET, len(entries))
    crc = crc32c(memoryview(buf)[COUNT_OFFSET:])
    struct.pack_into(">hI", buf, VERSION_OFFSET, SNAPSHOT_VERSION, crc)
    return bytes(buf)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Entries of a snapshot; CorruptSnapshotError when it cannot be trusted."""
    if len(data) < HEADER_SIZE:
        raise CorruptSnapshotError(f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if count < 0 or len(data) != HEADER_SIZE + count * ENTRY_SIZE:
        raise CorruptSnapshotError(f"{len(data)} bytes do not hold {count} entries of {ENTRY_SIZE} bytes")
    computed = crc32c(memoryview(data)[COUNT_OFFSET:])
    if computed != crc:
        raise CorruptSnapshotError(f"CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    entries = []
    for (pid, epoch, last_seq, last_offset, delta, ts, coord_epoch,
         txn_first) in _ENTRY.iter_unpack(data[ENTRIES_OFFSET:]):
        entry = ProducerStateEntry(pid, epoch, coord_epoch, ts, txn_first if txn_first >= 0 else -1)
        if last_offset >= 0:
            # Only the last batch survives a snapshot; its first sequence and
            # offset are derived from the delta, as Kafka's BatchMetadata does.
            entry.batches.append(BatchMetadata(decrement_sequence(last_seq, delta), last_seq,
                                               last_offset - delta, last_offset, ts))
        entries.append(entry)
    return entries
