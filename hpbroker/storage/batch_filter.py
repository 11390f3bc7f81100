"""Which records and batches of a segment a cleaning pass keeps, and the bytes
they become (Kafka's ``MemoryRecords.filterTo``).

A record stays when it has a key, no later record has that key (the pass's
offset map says which is latest), and it is not a tombstone past its delete
horizon.  Each batch then gets a ``Verdict``:

* ``COPY``: all its records stay and it needs no new horizon, so it is
  copied byte for byte (runs of such batches as one slice);
* ``FILTER``: its kept records are re-batched under the original header: same
  base offset, lastOffsetDelta (so the producer's last sequence survives),
  producer id/epoch/base sequence, partition leader epoch, attributes and
  codec; only batchLength, recordCount, maxTimestamp and the CRC change;
* ``HORIZON``: it still holds a tombstone, or is a control batch, and has no
  delete horizon yet, so it gets one: attribute bit 6 set and baseTimestamp =
  now + ``delete.retention.ms`` (KIP-534), its kept records re-encoded
  relative to it.  Tombstones and control batches go in the first pass after
  the horizon;
* ``EMPTY``: a data batch left with no records that carries a producer id
  keeps its 61-byte header with recordCount 0 (and no codec), so the
  producer's epoch and last sequence remain in the log.  The last batch of a
  segment group is kept so too -- a deviation from Kafka that makes every
  cleaned segment end exactly where its group ended, so the recovery of a
  ``.swap`` file knows exactly which segments it replaces;
* ``DROP``: nothing of it stays.

Legacy (v0/v1) batches are copied, never compacted.

Transactions, as Kafka's cleaner treats them (``AbortedTransactions`` says
which batches were aborted, from the segments' ``.txnindex``):

* an aborted transaction's data batches go whole (the pass's offset map
  never saw their keys either, so they shadow nothing); the last batch of a
  group stays as an empty header without its transactional bit;
* an empty header left of any data batch loses its transactional bit, so a
  recovery replaying it opens no transaction;
* a marker goes once its delete horizon passed and nothing of its
  transaction is left before it: otherwise a replay from the log start would
  find the transaction's data open forever.  The walk over the pass's
  batches, in offset order, carries which producers' transactions still
  hold data (``BatchFilter`` is used for one pass, group after group).
"""

import bisect
import struct
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np

from hpbroker.kernels import layout
from hpbroker.records import batch as batch_format
from hpbroker.records.batch_columns import data_batches
from hpbroker.records.compression import compress
from hpbroker.storage.offset_map import OffsetMap
from hpbroker.storage.record_columns import BatchRecords, decode

_HEADER = layout.BATCH_HEADER_SIZE
_I16, _I32, _I64, _U32 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">I")
# Attribute bits an empty batch keeps (Kafka's writeEmptyHeader: no codec, no horizon); an
# empty data batch also loses its transactional bit (it holds nothing of a transaction)
_EMPTY_KEEPS = layout.TIMESTAMP_TYPE_BIT | layout.TRANSACTIONAL_BIT | layout.CONTROL_BIT
_EMPTY_DATA_KEEPS = layout.TIMESTAMP_TYPE_BIT


class AbortedTransactions:
    """Which data batches belong to aborted transactions: a producer's batch
    with a base offset between an abort's first offset and its marker."""

    def __init__(self, aborted=()):
        # per producer, its aborts' (first offsets, marker offsets), sorted: one producer's
        # transactions follow each other, so the ranges do not overlap
        ranges: dict[int, list[tuple[int, int]]] = {}
        for a in aborted:
            ranges.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
        self._by_producer: dict[int, tuple[list[int], list[int]]] = {}
        for pid, r in ranges.items():
            r.sort()
            self._by_producer[pid] = ([first for first, _ in r], [last for _, last in r])

    def of(self, scan) -> np.ndarray:
        """Per batch of ``scan``: it is an aborted transaction's data batch."""
        found = np.zeros(len(scan.position), bool)
        if not self._by_producer:
            return found
        transactional = np.flatnonzero(((scan.attributes & layout.TRANSACTIONAL_BIT) != 0)
                                       & ((scan.attributes & layout.CONTROL_BIT) == 0) & (scan.magic == 2))
        pids, bases = scan.producer_id[transactional].tolist(), scan.base_offset[transactional].tolist()
        for i, pid, base in zip(transactional.tolist(), pids, bases):
            ranges = self._by_producer.get(pid)
            if ranges:
                j = bisect.bisect_right(ranges[0], base) - 1
                found[i] = j >= 0 and base <= ranges[1][j]
        return found


class Verdict(Enum):
    COPY = "copy"  # kept whole, byte for byte
    FILTER = "filter"  # its kept records under its own header
    HORIZON = "horizon"  # its kept records re-encoded under a new delete horizon
    EMPTY = "empty"  # its header alone, recordCount 0
    DROP = "drop"  # nothing of it stays


class BatchFacts(NamedTuple):
    """What a batch's verdict depends on."""

    magic: int
    is_control: bool
    has_delete_horizon: bool
    base_timestamp: int  # the delete horizon, when it has one
    record_count: int
    producer_id: int
    kept: int  # how many of its records stay
    kept_tombstones: int

    @property
    def kept_horizon(self) -> int:
        """The delete horizon the batch already carries, while it keeps
        something that needs one (a tombstone, or it is a control batch); -1 otherwise."""
        if self.magic == 2 and self.has_delete_horizon and (self.kept_tombstones or self.is_control):
            return self.base_timestamp
        return -1


def verdict(batch: BatchFacts, now: int, keep_empty: bool) -> Verdict:
    """What becomes of ``batch`` at time ``now``; ``keep_empty``: the batch
    may not vanish (it ends its group)."""
    if batch.magic != 2:
        return Verdict.COPY  # legacy messages are never compacted here
    if batch.is_control:
        if not batch.has_delete_horizon:
            return Verdict.HORIZON
        if now < batch.base_timestamp:
            return Verdict.COPY
        return Verdict.EMPTY if keep_empty else Verdict.DROP
    needs_horizon = batch.kept_tombstones and not batch.has_delete_horizon
    if batch.kept == batch.record_count:
        return Verdict.HORIZON if needs_horizon else Verdict.COPY
    if batch.kept == 0:
        return Verdict.EMPTY if batch.producer_id >= 0 or keep_empty else Verdict.DROP
    return Verdict.HORIZON if needs_horizon else Verdict.FILTER


class KeptRecords(NamedTuple):
    """Which records of one ``BatchRecords`` stay, and their byte spans in its buffer."""

    records: BatchRecords
    keep: np.ndarray  # per record
    starts: np.ndarray
    ends: np.ndarray


class BatchRows(NamedTuple):
    """One batch's records: rows [first, stop) of a ``KeptRecords``."""

    kept: KeptRecords
    first: int
    stop: int

    def keep(self) -> np.ndarray:
        return self.kept.keep[self.first : self.stop]


class KeptBatches(NamedTuple):
    """The batches a segment keeps, as ``LogSegment.stage`` takes them: their
    bytes, and per batch its position in them, size, last offset and max
    timestamp."""

    data: bytes | np.ndarray  # bytes, or one slice of the source segment's view
    positions: np.ndarray
    sizes: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray


@dataclass
class FilteredSegment:
    batches: KeptBatches | None  # None: nothing stays
    changed: bool  # anything differs from the source segment
    horizon: int  # the latest delete horizon among the kept batches, -1 for none
    records_kept: int
    tombstones_removed: int
    empty_batches: int


class _Output:
    """The kept batches in order; consecutive copied batches are gathered
    into one slice of the source."""

    def __init__(self, view: np.ndarray):
        self.view = view
        self.pieces = []
        self.positions, self.sizes, self.last_offsets, self.max_timestamps = [], [], [], []
        self.pos = 0
        self.run_start = self.run_end = -1  # the run of copied bytes not yet in pieces

    def copy(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if position != self.run_end:
            self._end_run()
            self.run_start = position
        self.run_end = position + size
        self._index(size, last_offset, max_timestamp)

    def add(self, data: bytes, last_offset: int) -> None:
        self._end_run()
        self.pieces.append(data)
        self._index(len(data), last_offset, _I64.unpack_from(data, layout.MAX_TIMESTAMP)[0])  # the rebuilt batch's

    def _index(self, size: int, last_offset: int, max_timestamp: int) -> None:
        self.positions.append(self.pos)
        self.sizes.append(size)
        self.last_offsets.append(last_offset)
        self.max_timestamps.append(max_timestamp)
        self.pos += size

    def _end_run(self) -> None:
        if self.run_start >= 0:
            self.pieces.append(self.view[self.run_start : self.run_end])
            self.run_start = self.run_end = -1

    def batches(self) -> KeptBatches | None:
        self._end_run()
        if not self.positions:
            return None
        data = b"".join(self.pieces) if len(self.pieces) != 1 else self.pieces[0]
        return KeptBatches(data, np.asarray(self.positions, np.int64), np.asarray(self.sizes, np.int64),
                           np.asarray(self.last_offsets, np.int64), np.asarray(self.max_timestamps, np.int64))


class BatchFilter:
    """Filters the segments of one pass, against its offset map and clock."""

    def __init__(self, offset_map: OffsetMap, now: int, delete_retention_ms: int,
                 aborted: AbortedTransactions | None = None):
        self.offset_map = offset_map
        self.now = now
        self.new_horizon = now + delete_retention_ms
        self.aborted = aborted or AbortedTransactions()
        # producers whose transaction, as the walk has seen it so far, keeps data: its marker stays
        self._holding_data: set[int] = set()

    def filter(self, view: np.ndarray, scan, keep_last: bool) -> FilteredSegment:
        """The kept batches of the segment ``view`` (scanned as ``scan``);
        ``keep_last``: its last batch stays, if only as an empty one."""
        nb = len(scan.position)
        has_horizon = (scan.attributes & layout.DELETE_HORIZON_BIT) != 0
        retain_deletes = ~has_horizon | (self.now < scan.base_timestamp)
        aborted = self.aborted.of(scan)
        kept = np.zeros(nb, np.int64)
        kept_tombs = np.zeros(nb, np.int64)
        rows_of: dict[int, BatchRows] = {}
        tombstones_removed = 0
        for records in decode(view, scan, data_batches(scan)):
            h1, h2, keyed = records.key_hashes()
            c = records.columns
            latest = keyed & (c.offset >= self.offset_map.get(h1, h2, keyed)) & ~aborted[records.batch_of_row]
            tomb = c.value_length < 0
            keep = latest & (~tomb | retain_deletes[records.batch_of_row])
            kept += np.bincount(records.batch_of_row, keep, nb).astype(np.int64)
            kept_tombs += np.bincount(records.batch_of_row, keep & tomb, nb).astype(np.int64)
            tombstones_removed += int(np.count_nonzero(tomb & ~keep & latest))
            rows = KeptRecords(records, keep, *records.spans())
            bounds = c.batch_first.tolist()
            for j, b in enumerate(records.batches.tolist()):
                rows_of[b] = BatchRows(rows, bounds[j], bounds[j + 1])

        out = _Output(view)
        changed, horizon, empty_batches = False, -1, 0
        is_control = (scan.attributes & layout.CONTROL_BIT) != 0
        facts = zip(scan.magic.tolist(), is_control.tolist(), has_horizon.tolist(), scan.base_timestamp.tolist(),
                    scan.record_count.tolist(), scan.producer_id.tolist(), kept.tolist(), kept_tombs.tolist())
        columns = zip(scan.position.tolist(), scan.size.tolist(), scan.last_offset.tolist(),
                      scan.max_timestamp.tolist(), scan.attributes.tolist(), aborted.tolist())
        for b, (fields, (position, size, last_offset, max_timestamp, attributes, was_aborted)) in enumerate(
                zip(facts, columns)):
            batch = BatchFacts(*fields)
            v = self._transactional_verdict(batch, attributes, was_aborted, keep_last and b == nb - 1)
            if v is Verdict.COPY:
                out.copy(position, size, last_offset, max_timestamp)
                horizon = max(horizon, batch.kept_horizon)
                continue
            changed = True
            if v is Verdict.EMPTY:
                empty_batches += 1
                out.add(empty_batch(view, position), last_offset)
            elif v is Verdict.HORIZON:
                out.add(with_delete_horizon(view, position, size, rows_of.get(b), self.new_horizon), last_offset)
                horizon = max(horizon, self.new_horizon)
            elif v is Verdict.FILTER:
                out.add(filtered_batch(view, position, attributes, rows_of[b]), last_offset)
                horizon = max(horizon, batch.kept_horizon)
        kept_batches = out.batches()
        return FilteredSegment(kept_batches, changed or (kept_batches is None and nb > 0), horizon,
                               int(kept.sum()), tombstones_removed, empty_batches)

    def _transactional_verdict(self, batch: BatchFacts, attributes: int, was_aborted: bool,
                               keep_empty: bool) -> Verdict:
        """``verdict``, with what transactions add: an aborted batch goes, and a
        marker stays while its transaction keeps data before it."""
        if batch.magic != 2 or batch.producer_id < 0:
            return verdict(batch, self.now, keep_empty)
        if batch.is_control:
            holds_data = batch.producer_id in self._holding_data
            self._holding_data.discard(batch.producer_id)
            if holds_data:
                return Verdict.COPY if batch.has_delete_horizon else Verdict.HORIZON
            return verdict(batch, self.now, keep_empty)
        if was_aborted:
            return Verdict.EMPTY if keep_empty else Verdict.DROP
        v = verdict(batch, self.now, keep_empty)
        if attributes & layout.TRANSACTIONAL_BIT:
            if v is Verdict.COPY and batch.record_count == 0:
                v = Verdict.EMPTY  # an empty header as Kafka's cleaner leaves them: its transactional bit goes
            if v in (Verdict.COPY, Verdict.FILTER, Verdict.HORIZON):
                self._holding_data.add(batch.producer_id)
        return v


def empty_batch(view, pos: int) -> bytes:
    """The batch's header alone, recordCount 0 (Kafka's writeEmptyHeader)."""
    data = bytearray(view[pos : pos + _HEADER].tobytes())
    (attrs,) = _I16.unpack_from(data, layout.ATTRIBUTES)
    _I16.pack_into(data, layout.ATTRIBUTES, attrs & (_EMPTY_KEEPS if attrs & layout.CONTROL_BIT else _EMPTY_DATA_KEEPS))
    max_ts = _I64.unpack_from(data, layout.MAX_TIMESTAMP)[0]
    _I64.pack_into(data, layout.BASE_TIMESTAMP, max_ts)
    _I32.pack_into(data, layout.BATCH_LENGTH, _HEADER - layout.LOG_OVERHEAD)
    _I32.pack_into(data, layout.RECORD_COUNT, 0)
    _U32.pack_into(data, layout.CRC, batch_format.compute_crc(data))
    return bytes(data)


def filtered_batch(view, pos: int, attributes: int, rows: BatchRows) -> bytes:
    """The batch with only its kept records, their bytes copied unchanged: the
    base offset and base timestamp stay, so every record's deltas stay valid."""
    kept = rows.kept
    mv = memoryview(kept.records.buf)  # pyright: ignore[reportArgumentType]  (numpy types __buffer__ from 3.12 on)
    sel = np.flatnonzero(rows.keep()) + rows.first
    body = b"".join(mv[s:e] for s, e in zip(kept.starts[sel].tolist(), kept.ends[sel].tolist()))
    codec = attributes & layout.COMPRESSION_MASK
    if codec:
        body = compress(codec, body)
    data = bytearray(view[pos : pos + _HEADER].tobytes())
    data += body
    if not attributes & layout.TIMESTAMP_TYPE_BIT:
        _I64.pack_into(data, layout.MAX_TIMESTAMP, int(kept.records.columns.timestamp[sel].max()))
    _I32.pack_into(data, layout.BATCH_LENGTH, len(data) - layout.LOG_OVERHEAD)
    _I32.pack_into(data, layout.RECORD_COUNT, len(sel))
    _U32.pack_into(data, layout.CRC, batch_format.compute_crc(data))
    return bytes(data)


def with_delete_horizon(view, pos: int, size: int, rows: BatchRows | None, horizon: int) -> bytes:
    """The batch with its kept records (all of them when ``rows`` is None: a
    control batch) re-encoded around the delete horizon ``horizon``."""
    original = batch_format.decode_batch(view[pos : pos + size].tobytes(), verify_crc=False)
    h = original.header
    records = original.records
    if rows is not None:
        records = [rec for rec, k in zip(records, rows.keep().tolist()) if k]
    data = bytearray(batch_format.encode_batch(
        records, base_offset=h.base_offset, compression=h.compression, timestamp_type=h.timestamp_type,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, control=h.is_control, partition_leader_epoch=h.partition_leader_epoch,
        delete_horizon_ms=horizon,
    ))
    # Kafka's overrideLastOffset: the batch keeps its original last offset (and so its last sequence).
    _I32.pack_into(data, layout.LAST_OFFSET_DELTA, h.last_offset_delta)
    _U32.pack_into(data, layout.CRC, batch_format.compute_crc(data))
    return bytes(data)
