"""Log compaction (Kafka's LogCleaner) for ``cleanup.policy=compact``.

One pass over a log, as Kafka's ``Cleaner.clean`` does it:

1. **Range.**  The first dirty offset is the cleaner checkpoint (reset to the
   log start when outside the log); the first uncleanable offset is the
   lowest of the active segment's base, the written offset, the first offset
   of an open transaction, and the base of the first segment holding a record
   younger than ``min.compaction.lag.ms`` -- rounded down to a segment base,
   since segments are cleaned whole.  Everything below the first dirty offset
   was cleaned before ("clean"), the rest up to the uncleanable offset is dirty.
2. **Offset map.**  Every keyed data record of the dirty segments goes into an
   ``OffsetMap`` (key hash -> latest offset); a pass indexes as many whole
   dirty segments as ``log.cleaner.dedupe.buffer.size`` (and ``max_bytes``)
   allow, and that boundary becomes the pass's end and the new checkpoint.
3. **Rewrite.**  Every segment from the log start to the end, in groups whose
   summed sizes and index entries fit one segment, is copied into one new
   segment: a record is kept when it has a key, no later record has that key,
   and it is not a tombstone past its delete horizon.
4. **Swap.**  Each group's new segment is written as ``<base>.log.cleaned``
   (+ ``.index.cleaned``, ``.timeindex.cleaned``; ``base`` = the group's first
   base offset) and fsynced, renamed to ``.swap``, put into the log's segment
   list in place of the group (under the log's lock, copy-on-write), the old
   segments renamed ``.deleted`` (unlinked after ``file.delete.delay.ms``), and
   finally the ``.swap`` files renamed to their plain names.

Batch rules (Kafka's ``MemoryRecords.filterTo``):

* a batch whose records all stay and that needs no new horizon is copied
  byte for byte;
* otherwise its kept records are re-batched under the original header: same
  base offset, lastOffsetDelta (so the producer's last sequence survives),
  producer id/epoch/base sequence, partition leader epoch, attributes and
  codec; only batchLength, recordCount, maxTimestamp and the CRC change;
* a batch that still holds a tombstone (null value) or is a control batch and
  has no delete horizon yet gets one: attribute bit 6 set and baseTimestamp =
  now + ``delete.retention.ms`` (KIP-534), its records re-encoded relative to
  it.  Tombstones and control batches go in the first pass after the horizon;
* a data batch left with no records is dropped, unless it carries a producer
  id: then its 61-byte header stays with recordCount 0 (and no codec), so the
  producer's epoch and last sequence remain in the log;
* the last batch of a group is kept (empty if need be) too -- a deviation from
  Kafka that makes every cleaned segment end exactly where its group ended, so
  the recovery of a ``.swap`` file knows exactly which segments it replaces.

Crash recovery (``log._tidy_directory``): ``.cleaned`` files are deleted (the
pass never reached the swap), index ``.swap`` files too (rebuilt from the
log), and a ``<base>.log.swap`` completes its swap: the segments with base
offsets in ``[base, its next offset)`` go and it takes its plain name.  The
checkpoint only advances after a pass, so a crash repeats at most one pass.

Not done: aborted transactional records are compacted like committed ones
(Kafka drops them), and control batches simply live as long as tombstones.
"""

import bisect
import logging
import os
import struct
import threading
from dataclasses import dataclass, field

import numpy as np

from hpbroker.kernels import decode_records, layout, scan_batches
from hpbroker.kernels.batch_scan import STOP_END
from hpbroker.records import batch as batch_format
from hpbroker.records.compression import compress, decompress
from hpbroker.storage import checkpoints, filenames
from hpbroker.storage.errors import CorruptBatchError, InvalidRecordError
from hpbroker.storage.offset_map import OffsetMap, hash_keys
from hpbroker.storage.segment import LogSegment

log = logging.getLogger(__name__)

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_HEADER = layout.BATCH_HEADER_SIZE
_I16, _I32, _I64, _U32 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">I")
# Attribute bits an empty batch keeps (Kafka's writeEmptyHeader: no codec, no horizon).
_EMPTY_KEEPS = layout.TIMESTAMP_TYPE_BIT | layout.TRANSACTIONAL_BIT | layout.CONTROL_BIT


@dataclass(frozen=True)
class CleanablePlan:
    """Kafka's LogToClean: what a pass over this log would cover."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    max_lag_exceeded: bool  # the oldest dirty record is older than max.compaction.lag.ms
    delete_horizon_passed: bool  # tombstones seen by the last pass may now go

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def worth_cleaning(self, min_ratio: float) -> bool:
        if self.dirty_bytes and (self.dirty_ratio > min_ratio or self.max_lag_exceeded):
            return True
        return self.delete_horizon_passed


@dataclass
class CleanResult:
    first_dirty_offset: int = -1
    end_offset: int = -1  # the new cleaner checkpoint; -1 when nothing was cleanable
    segments_read: int = 0
    groups_swapped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    empty_batches: int = 0
    aborted: str = ""  # why the pass stopped early: "busy", "log changed", ...
    latest_delete_horizon: int = -1
    swapped_bases: list = field(default_factory=list)


# --- planning ---------------------------------------------------------------------

def _first_unstable_offset(partition_log) -> int:
    firsts = [e.current_txn_first_offset for e in partition_log.producer_state.producers.values()
              if e.current_txn_first_offset >= 0]
    return min(firsts, default=_INT64_MAX)


def _largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return os.stat(segment.log_path).st_mtime_ns // 1_000_000


def plan(partition_log, now: int) -> CleanablePlan | None:
    """The cleanable range of a compacted log, or None (not compacted, or
    nothing below the active segment)."""
    config = partition_log.config
    if not config.compact:
        return None
    segments = partition_log.segments
    bases = [s.base_offset for s in segments]
    start, written = partition_log.log_start_offset, partition_log.written_offset
    first_dirty = partition_log.cleaner_checkpoint
    if not start <= first_dirty <= written:
        first_dirty = start  # Kafka resets a checkpoint outside the log
    uncleanable = min(segments[-1].base_offset, written, _first_unstable_offset(partition_log))
    if config.min_compaction_lag_ms > 0:
        for s in segments[:-1]:
            if s.next_offset > first_dirty and _largest_timestamp(s) > now - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, s.base_offset)
                break
    i = bisect.bisect_right(bases, uncleanable) - 1
    uncleanable = bases[i] if i >= 0 else bases[0]  # segments are cleaned whole
    cleanable = [s for s in segments[:-1] if s.base_offset < uncleanable]
    if not cleanable:
        return None
    clean_bytes = sum(s.size for s in cleanable if s.next_offset <= first_dirty)
    dirty = [s for s in cleanable if s.next_offset > first_dirty]
    dirty_bytes = sum(s.size for s in dirty)
    lag_exceeded = False
    if dirty and config.max_compaction_lag_ms < _INT64_MAX:
        first_ts = dirty[0].first_batch_timestamp
        lag_exceeded = 0 <= first_ts < now - config.max_compaction_lag_ms
    horizon = partition_log.latest_delete_horizon
    return CleanablePlan(first_dirty, uncleanable, clean_bytes, dirty_bytes, lag_exceeded, 0 <= horizon <= now)


# --- decoding a segment's records ----------------------------------------------------

@dataclass
class _Records:
    """The records of some batches of a segment, decoded from one buffer."""

    buf: np.ndarray
    batches: np.ndarray  # indexes into the scan, in order
    body_start: np.ndarray  # per batch: where its (decompressed) records start in buf
    cols: object  # DecodedRecords
    batch_of_row: np.ndarray  # per record: index into the scan


def _decode(view: np.ndarray, scan, which: np.ndarray) -> list[_Records]:
    """Decode the records of batches ``which`` of ``scan``: uncompressed ones
    straight from the segment view, compressed ones from one buffer of their
    decompressed bodies."""
    attrs = scan.attributes[which]
    codec = attrs & layout.COMPRESSION_MASK
    lat = np.where(attrs & layout.TIMESTAMP_TYPE_BIT, scan.max_timestamp[which], -1)
    out = []
    for plain in (True, False):
        sel = (codec == 0) if plain else (codec != 0)
        idx = which[sel]
        if not len(idx):
            continue
        if plain:
            buf = view
            starts = scan.position[idx] + _HEADER
            ends = scan.position[idx] + scan.size[idx]
        else:
            bodies = [decompress(int(c), view[p + _HEADER : p + n])
                      for c, p, n in zip(codec[sel].tolist(), scan.position[idx].tolist(), scan.size[idx].tolist())]
            lengths = np.fromiter((len(b) for b in bodies), np.int64, len(bodies))
            ends = np.cumsum(lengths)
            starts = ends - lengths
            buf = np.frombuffer(b"".join(bodies), np.uint8) if bodies else np.zeros(0, np.uint8)
        cols = decode_records(buf, starts, ends, scan.base_offset[idx], scan.base_timestamp[idx],
                              scan.record_count[idx], lat[sel])
        if cols.error_batch >= 0:
            bad = int(idx[cols.error_batch])
            raise CorruptBatchError(f"batch at offset {int(scan.base_offset[bad])} has malformed records")
        counts = np.diff(cols.batch_first)
        out.append(_Records(buf, idx, starts, cols, np.repeat(idx, counts)))
    return out


def _record_spans(r: _Records) -> tuple[np.ndarray, np.ndarray]:
    """Byte range of every record (length prefix included) in ``r.buf``: each
    ends after its value (plus the 1-byte zero header count) or its last
    header, and starts where the previous one ended."""
    c = r.cols
    end = c.value_start + np.maximum(c.value_length, 0) + 1
    with_headers = np.flatnonzero(c.header_count > 0)
    if len(with_headers):
        last = c.header_first[with_headers] + c.header_count[with_headers] - 1
        end[with_headers] = c.header_value_start[last] + np.maximum(c.header_value_length[last], 0)
    start = np.empty_like(end)
    start[1:] = end[:-1]
    firsts = c.batch_first[:-1]
    nonempty = firsts < c.batch_first[1:]
    start[firsts[nonempty]] = r.body_start[nonempty]
    return start, end


def check_keys(buf, scan) -> None:
    """Kafka's rule for compacted topics: every data record needs a key."""
    data = np.flatnonzero((scan.attributes & layout.CONTROL_BIT) == 0)
    if not len(data):
        return
    view = np.frombuffer(buf, np.uint8)
    for r in _decode(view, scan, data):
        if (r.cols.key_length < 0).any():
            raise InvalidRecordError("compacted topic cannot accept a record without a key")


# --- one pass ---------------------------------------------------------------------------

def _scan_segment(segment: LogSegment, verify_crc: bool = True):
    view = segment.view()
    scan = scan_batches(view, 0, len(view), verify_crc=verify_crc)
    if scan.stop != STOP_END:
        raise CorruptBatchError(f"{segment.log_path}: invalid batch at byte {scan.valid_end}")
    return view, scan


def _data_batches(scan) -> np.ndarray:
    return np.flatnonzero((scan.magic == 2) & ((scan.attributes & layout.CONTROL_BIT) == 0))


def _keys(r: _Records):
    c = r.cols
    h1, h2 = hash_keys(r.buf, c.key_start, c.key_length)
    return h1, h2, c.key_length >= 0


def _group(segments: list, config) -> list[list]:
    """Kafka's groupSegmentsBySize: consecutive segments whose summed bytes and
    index entries fit one segment, and whose offsets fit int32 deltas."""
    groups, current = [], []
    size = entries = time_entries = 0
    for s in segments:
        if current and (
            size + s.size > config.segment_bytes
            or entries + len(s.offset_index) >= s.offset_index.max_entries
            or time_entries + len(s.time_index) >= s.time_index.max_entries
            or s.next_offset - 1 - current[0].base_offset > _INT32_MAX
        ):
            groups.append(current)
            current, size, entries, time_entries = [], 0, 0, 0
        current.append(s)
        size += s.size
        entries += len(s.offset_index)
        time_entries += len(s.time_index)
    if current:
        groups.append(current)
    return groups


class _Pass:
    def __init__(self, partition_log, now: int, max_bytes: int | None):
        self.log = partition_log
        self.config = partition_log.config
        self.now = now
        self.max_bytes = max_bytes
        self.new_horizon = now + self.config.delete_retention_ms
        self.result = CleanResult()
        self._verified: set[int] = set()  # segments whose CRCs the map building checked

    def run(self) -> CleanResult:
        p = plan(self.log, self.now)
        if p is None:
            return self.result
        segments = [s for s in self.log.segments[:-1] if s.base_offset < p.first_uncleanable_offset]
        end = self._build_map(segments, p.first_dirty_offset, p.first_uncleanable_offset)
        self.result.first_dirty_offset = p.first_dirty_offset
        to_clean = [s for s in segments if s.base_offset < end]
        horizon = -1
        for group in _group(to_clean, self.config):
            swapped, group_horizon = self._clean_group(group)
            horizon = max(horizon, group_horizon)
            if swapped is False:
                self.result.aborted = "log changed"
                return self.result
        self.result.end_offset = max(end, p.first_dirty_offset)
        self.result.latest_delete_horizon = horizon
        self.log._cleaned(self.result.end_offset, horizon)
        return self.result

    def _build_map(self, segments: list, first_dirty: int, uncleanable: int) -> int:
        """Index the dirty segments that fit; returns the end of the indexed
        range (a segment base), or ``first_dirty`` when none was dirty."""
        self.map = OffsetMap(self.config.cleaner_dedupe_buffer_size)
        end, indexed_bytes = first_dirty, 0
        for i, s in enumerate(segments):
            if s.next_offset <= first_dirty:
                continue
            view, scan = _scan_segment(s)
            self._verified.add(id(s))
            if end > first_dirty:  # at least one segment per pass, however big
                too_big = self.max_bytes is not None and indexed_bytes + s.size > self.max_bytes
                if too_big or not self.map.can_take(int(scan.record_count.sum())):
                    break
            for r in _decode(view, scan, _data_batches(scan)):
                h1, h2, keyed = _keys(r)
                self.map.put(h1, h2, r.cols.offset, keyed & (r.cols.offset >= first_dirty))
            indexed_bytes += s.size
            end = segments[i + 1].base_offset if i + 1 < len(segments) else uncleanable
        return end

    def _clean_group(self, group: list):
        """Rewrite one group; returns (True | None | False, latest horizon):
        swapped, nothing to change, or the log changed under the pass."""
        cleaned, horizon = None, -1
        for n, source in enumerate(group):
            last_of_group = n == len(group) - 1
            out, changed, seg_horizon = self._filter(source, last_of_group)
            horizon = max(horizon, seg_horizon)
            if cleaned is None and not changed and len(group) == 1:
                return None, horizon
            if cleaned is None:
                cleaned = self._new_segment(group)
            if out is not None:
                data, positions, sizes, last_offsets, max_ts = out
                cleaned.stage(data, positions, sizes, last_offsets, max_ts)
                cleaned.write()
                self.result.bytes_written += len(data)
        return self._swap(group, cleaned), horizon

    def _new_segment(self, group: list) -> LogSegment:
        base = group[0].base_offset
        for suffix in (filenames.LOG_SUFFIX, filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX):
            try:  # left by a pass abandoned earlier in this process
                os.unlink(filenames.segment_file(self.log.directory, base, suffix) + filenames.CLEANED_SUFFIX)
            except FileNotFoundError:
                pass
        return LogSegment(
            self.log.directory, base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=min(s.created_ms for s in group),
            suffix=filenames.CLEANED_SUFFIX,
        )

    def _swap(self, group: list, cleaned: LogSegment) -> bool:
        cleaned.seal_time_index()
        cleaned.flush()
        # Retention by mtime must see the group's age, not the pass's (as Kafka does).
        mtime = max(os.stat(s.log_path).st_mtime_ns for s in group)
        os.utime(cleaned.log_path, ns=(mtime, mtime))
        cleaned.change_suffix(filenames.SWAP_SUFFIX)
        checkpoints.fsync_dir(self.log.directory)
        if not self.log._replace_segments(group, cleaned):
            cleaned.close_and_unlink()
            return False
        self.result.groups_swapped += 1
        self.result.swapped_bases.append(cleaned.base_offset)
        return True

    def _filter(self, segment: LogSegment, last_of_group: bool):
        """The kept batches of one segment: ((data, positions, sizes,
        last_offsets, max_timestamps) or None when empty, changed, horizon)."""
        view, scan = _scan_segment(segment, verify_crc=id(segment) not in self._verified)
        nb = len(scan.position)
        res = self.result
        res.segments_read += 1
        res.bytes_read += len(view)
        res.records_read += int(scan.record_count.sum())
        kept = np.zeros(nb, np.int64)
        kept_tombs = np.zeros(nb, np.int64)
        attrs = scan.attributes
        has_horizon = (attrs & layout.DELETE_HORIZON_BIT) != 0
        retain_deletes = ~has_horizon | (self.now < scan.base_timestamp)
        decoded = _decode(view, scan, _data_batches(scan))
        keep_of = {}
        for r in decoded:
            h1, h2, keyed = _keys(r)
            found = self.map.get(h1, h2, keyed)
            c = r.cols
            tomb = c.value_length < 0
            keep = keyed & (c.offset >= found) & (~tomb | retain_deletes[r.batch_of_row])
            kept += np.bincount(r.batch_of_row, keep, nb).astype(np.int64)
            kept_tombs += np.bincount(r.batch_of_row, keep & tomb, nb).astype(np.int64)
            res.tombstones_removed += int(np.count_nonzero(tomb & ~keep & keyed & (c.offset >= found)))
            starts, ends = _record_spans(r)
            first_row = c.batch_first[:-1]
            for j, b in enumerate(r.batches.tolist()):
                keep_of[b] = (r, keep, starts, ends, int(first_row[j]), int(c.batch_first[j + 1]))

        pieces, positions, sizes, last_offsets, max_ts = [], [], [], [], []
        changed, horizon, pos = False, -1, 0
        run_start = run_end = -1  # a run of batches copied verbatim, emitted as one slice

        def emit(data, last_offset):
            nonlocal pos
            pieces.append(data)
            positions.append(pos)
            sizes.append(len(data))
            last_offsets.append(last_offset)
            max_ts.append(_I64.unpack_from(data, layout.MAX_TIMESTAMP)[0])  # the rebuilt batch's
            pos += len(data)

        p_col, s_col, last_col = scan.position.tolist(), scan.size.tolist(), scan.last_offset.tolist()
        mts_col, pid_col, cnt_col = scan.max_timestamp.tolist(), scan.producer_id.tolist(), scan.record_count.tolist()
        for b in range(nb):
            bpos, bsize = p_col[b], s_col[b]
            verdict = self._verdict(b, scan, has_horizon, kept, kept_tombs, cnt_col, pid_col, last_of_group and b == nb - 1)
            if verdict == "copy":
                if run_start < 0:
                    run_start = bpos
                run_end = bpos + bsize
                positions.append(pos)
                sizes.append(bsize)
                last_offsets.append(last_col[b])
                max_ts.append(mts_col[b])
                pos += bsize
                if scan.magic[b] == 2 and (has_horizon[b] and (kept_tombs[b] or attrs[b] & layout.CONTROL_BIT)):
                    horizon = max(horizon, int(scan.base_timestamp[b]))
                continue
            if run_start >= 0:
                pieces.append(view[run_start:run_end])
                run_start = -1
            changed = True
            if verdict == "drop":
                continue
            if verdict == "empty":
                res.empty_batches += 1
                emit(_empty_batch(view, bpos), last_col[b])
            elif verdict == "horizon":
                emit(self._reencode(view, bpos, bsize, keep_of.get(b)), last_col[b])
                horizon = max(horizon, self.new_horizon)
            else:  # "filter"
                emit(_filtered_batch(view, bpos, scan, b, keep_of[b]), last_col[b])
                if has_horizon[b] and kept_tombs[b]:
                    horizon = max(horizon, int(scan.base_timestamp[b]))
        if run_start >= 0:
            pieces.append(view[run_start:run_end])
        res.records_kept += int(kept.sum())
        if not positions:
            return None, changed or nb > 0, horizon
        data = b"".join(pieces) if len(pieces) != 1 else pieces[0]
        out = (data, np.asarray(positions, np.int64), np.asarray(sizes, np.int64),
               np.asarray(last_offsets, np.int64), np.asarray(max_ts, np.int64))
        return out, changed, horizon

    def _verdict(self, b, scan, has_horizon, kept, kept_tombs, counts, pids, must_keep) -> str:
        """copy | drop | empty | horizon | filter for batch ``b``."""
        if scan.magic[b] != 2:
            return "copy"  # legacy messages are never compacted here
        if scan.attributes[b] & layout.CONTROL_BIT:
            if not has_horizon[b]:
                return "horizon"
            if self.now < scan.base_timestamp[b]:
                return "copy"
            return "empty" if must_keep else "drop"
        if kept[b] == counts[b]:
            return "horizon" if kept_tombs[b] and not has_horizon[b] else "copy"
        if kept[b] == 0:
            return "empty" if pids[b] >= 0 or must_keep else "drop"
        return "horizon" if kept_tombs[b] and not has_horizon[b] else "filter"

    def _reencode(self, view, pos: int, size: int, rows) -> bytes:
        """The batch with its kept records re-encoded around a new delete horizon."""
        original = batch_format.decode_batch(view[pos : pos + size].tobytes(), verify_crc=False)
        h = original.header
        records = original.records
        if rows is not None:
            r, keep, _, _, first, stop = rows
            records = [rec for rec, k in zip(records, keep[first:stop].tolist()) if k]
        data = bytearray(batch_format.encode_batch(
            records, base_offset=h.base_offset, compression=h.compression, timestamp_type=h.timestamp_type,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
            transactional=h.is_transactional, control=h.is_control, partition_leader_epoch=h.partition_leader_epoch,
            delete_horizon_ms=self.new_horizon,
        ))
        # Kafka's overrideLastOffset: the batch keeps its original last offset (and so its last sequence).
        _I32.pack_into(data, layout.LAST_OFFSET_DELTA, h.last_offset_delta)
        _U32.pack_into(data, layout.CRC, batch_format.compute_crc(data))
        return bytes(data)


def _empty_batch(view, pos: int) -> bytes:
    """The batch's header alone, recordCount 0 (Kafka's writeEmptyHeader)."""
    data = bytearray(view[pos : pos + _HEADER].tobytes())
    (attrs,) = _I16.unpack_from(data, layout.ATTRIBUTES)
    _I16.pack_into(data, layout.ATTRIBUTES, attrs & _EMPTY_KEEPS)
    max_ts = _I64.unpack_from(data, layout.MAX_TIMESTAMP)[0]
    _I64.pack_into(data, layout.BASE_TIMESTAMP, max_ts)
    _I32.pack_into(data, layout.BATCH_LENGTH, _HEADER - layout.LOG_OVERHEAD)
    _I32.pack_into(data, layout.RECORD_COUNT, 0)
    _U32.pack_into(data, layout.CRC, batch_format.compute_crc(data))
    return bytes(data)


def _filtered_batch(view, pos: int, scan, b: int, rows) -> bytes:
    """The batch with only its kept records, their bytes copied unchanged: the
    base offset and base timestamp stay, so every record's deltas stay valid."""
    r, keep, starts, ends, first, stop = rows
    mv = memoryview(r.buf)
    sel = np.flatnonzero(keep[first:stop]) + first
    body = b"".join(mv[s:e] for s, e in zip(starts[sel].tolist(), ends[sel].tolist()))
    attrs = int(scan.attributes[b])
    codec = attrs & layout.COMPRESSION_MASK
    if codec:
        body = compress(codec, body)
    data = bytearray(view[pos : pos + _HEADER].tobytes())
    data += body
    if not attrs & layout.TIMESTAMP_TYPE_BIT:
        _I64.pack_into(data, layout.MAX_TIMESTAMP, int(r.cols.timestamp[sel].max()))
    _I32.pack_into(data, layout.BATCH_LENGTH, len(data) - layout.LOG_OVERHEAD)
    _I32.pack_into(data, layout.RECORD_COUNT, len(sel))
    _U32.pack_into(data, layout.CRC, batch_format.compute_crc(data))
    return bytes(data)


def clean_log(partition_log, now: int, max_bytes: int | None = None) -> CleanResult:
    """One pass (see the module docstring); at most one at a time per log."""
    if not partition_log._clean_lock.acquire(blocking=False):
        return CleanResult(aborted="busy")
    try:
        return _Pass(partition_log, now, max_bytes).run()
    finally:
        partition_log._clean_lock.release()


class CleanerThread(threading.Thread):
    """Runs ``manager.clean_eligible`` in the background, waiting
    ``log.cleaner.backoff.ms`` whenever a round found nothing to clean."""

    def __init__(self, manager, backoff_ms: int | None = None, now=None):
        super().__init__(name="log-cleaner", daemon=True)
        self.manager = manager
        self.backoff_s = (manager.config.cleaner_backoff_ms if backoff_ms is None else backoff_ms) / 1000
        self._stop_event = threading.Event()
        self._now = now

    def run(self) -> None:
        from hpbroker.storage.log import now_ms

        clock = self._now or now_ms
        while not self._stop_event.is_set():
            try:
                results = self.manager.clean_eligible(clock())
            except Exception:  # a cleaner that dies silently would let logs grow unbounded
                log.exception("log cleaner round failed")
                results = {}
            if not any(r.groups_swapped for r in results.values()):
                self._stop_event.wait(self.backoff_s)

    def stop(self, timeout: float | None = None) -> None:
        self._stop_event.set()
        self.join(timeout)
