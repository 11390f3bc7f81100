"""Log compaction (Kafka's LogCleaner) for ``cleanup.policy=compact``.

One pass over a log, as Kafka's ``Cleaner.clean`` does it:

1. **Range.**  ``cleaner_plan.plan`` says which segments are dirty: from the
   cleaner checkpoint up to the first uncleanable offset (the active segment,
   open transactions, ``min.compaction.lag.ms``).
2. **Offset map.**  Every keyed data record of the dirty segments goes into an
   ``OffsetMap`` (key hash -> latest offset); a pass indexes as many whole
   dirty segments as ``log.cleaner.dedupe.buffer.size`` (and ``max_bytes``)
   allow, and that boundary becomes the pass's end and the new checkpoint.
3. **Rewrite.**  Every segment from the log start to the end, in groups whose
   summed sizes and index entries fit one segment, is copied into one new
   segment, keeping what ``batch_filter`` decides stays.
4. **Swap.**  Each group's new segment is written as ``<base>.log.cleaned``
   (+ ``.index.cleaned``, ``.timeindex.cleaned``; ``base`` = the group's first
   base offset) and fsynced, renamed to ``.swap``, and handed to
   ``Log.replace_segments``: put into the log's segment list in place of the
   group (under the log's lock, copy-on-write), the old segments renamed
   ``.deleted`` (unlinked after ``file.delete.delay.ms``), and finally the
   ``.swap`` files renamed to their plain names.

Crash recovery (when the log opens): ``.cleaned`` files are deleted (the
pass never reached the swap), index ``.swap`` files too (rebuilt from the
log), and a ``<base>.log.swap`` completes its swap: the segments with base
offsets in ``[base, its next offset)`` go and it takes its plain name.  The
checkpoint only advances after a pass, so a crash repeats at most one pass.

Threading: a pass may run in a thread other than the appending one.  It
reads only inactive segments, which never change, and takes the log's lock
only to swap a cleaned segment in; appends never wait for it except when
they roll.  Stop cleaning before closing the log.
"""

import logging
import os
import threading
from dataclasses import dataclass, field
from enum import Enum

from hpbroker.clock import now_ms
from hpbroker.kernels import scan_batches
from hpbroker.kernels.batch_scan import STOP_END
from hpbroker.records.batch_columns import data_batches
from hpbroker.storage import checkpoints, filenames
from hpbroker.storage.batch_filter import AbortedTransactions, BatchFilter, FilteredSegment
from hpbroker.storage.cleaner_plan import group_by_size, plan
from hpbroker.storage.errors import CorruptBatchError
from hpbroker.storage.offset_map import OffsetMap
from hpbroker.storage.record_columns import decode
from hpbroker.storage.segment import LogSegment

log = logging.getLogger(__name__)


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


class GroupOutcome(Enum):
    SWAPPED = "swapped"
    UNCHANGED = "unchanged"  # one segment that would come out the same: left as it is
    LOG_CHANGED = "log changed"  # the group left the log (retention, close) during the pass


def clean_log(partition_log, now: int, max_bytes: int | None = None) -> CleanResult:
    """Compact what is cleanable now, whatever the dirty ratio; ``max_bytes``
    bounds the dirty bytes indexed by this pass.  At most one pass at a time
    per log: another caller meanwhile gets a result aborted as "busy"."""
    with partition_log.cleaning() as acquired:
        if not acquired:
            return CleanResult(aborted="busy")
        return Cleaner(partition_log, now, max_bytes).run()


def scan_segment(segment: LogSegment, verify_crc: bool = True):
    """The segment's view and batch scan; CorruptBatchError unless every byte is whole batches."""
    view = segment.view()
    scan = scan_batches(view, 0, len(view), verify_crc=verify_crc)
    if scan.stop != STOP_END:
        raise CorruptBatchError(f"{segment.log_path}: invalid batch at byte {scan.valid_end}")
    return view, scan


class Cleaner:
    """One pass over one log (see the module docstring)."""

    def __init__(self, partition_log, now: int, max_bytes: int | None):
        self.log = partition_log
        self.config = partition_log.config
        self.now = now
        self.max_bytes = max_bytes
        self.result = CleanResult()
        self._verified: set[int] = set()  # segments whose CRCs the map building checked
        self._aborted = AbortedTransactions()

    def run(self) -> CleanResult:
        p = plan(self.log, self.now)
        if p is None:
            return self.result
        segments = [s for s in self.log.segments[:-1] if s.base_offset < p.first_uncleanable_offset]
        offset_map = OffsetMap(self.config.cleaner_dedupe_buffer_size)
        self._aborted = AbortedTransactions(e for s in self.log.segments for e in s.txn_index.entries)
        end = self._build_map(offset_map, segments, p.first_dirty_offset, p.first_uncleanable_offset)
        self.result.first_dirty_offset = p.first_dirty_offset
        batch_filter = BatchFilter(offset_map, self.now, self.config.delete_retention_ms, self._aborted)
        to_clean = [s for s in segments if s.base_offset < end]
        horizon = -1
        for group in group_by_size(to_clean, self.config):
            outcome, group_horizon = self._clean_group(group, batch_filter)
            horizon = max(horizon, group_horizon)
            if outcome is GroupOutcome.LOG_CHANGED:
                self.result.aborted = "log changed"
                return self.result
        self.result.end_offset = max(end, p.first_dirty_offset)
        self.result.latest_delete_horizon = horizon
        self.log.mark_cleaned(self.result.end_offset, horizon)
        return self.result

    def _build_map(self, offset_map: OffsetMap, segments: list, first_dirty: int, uncleanable: int) -> int:
        """Index the dirty segments that fit into ``offset_map``; returns the end
        of the indexed range (a segment base), or ``first_dirty`` when none was dirty."""
        end, indexed_bytes = first_dirty, 0
        for i, s in enumerate(segments):
            if s.next_offset <= first_dirty:
                continue
            view, scan = scan_segment(s)
            self._verified.add(id(s))
            if end > first_dirty:  # at least one segment per pass, however big
                too_big = self.max_bytes is not None and indexed_bytes + s.size > self.max_bytes
                if too_big or not offset_map.can_take(int(scan.record_count.sum())):
                    break
            which = data_batches(scan)
            which = which[~self._aborted.of(scan)[which]]  # an aborted record shadows nothing
            for records in decode(view, scan, which):
                h1, h2, keyed = records.key_hashes()
                offsets = records.columns.offset
                offset_map.put(h1, h2, offsets, keyed & (offsets >= first_dirty))
            indexed_bytes += s.size
            end = segments[i + 1].base_offset if i + 1 < len(segments) else uncleanable
        return end

    def _clean_group(self, group: list, batch_filter: BatchFilter) -> tuple[GroupOutcome, int]:
        """Rewrite one group; returns what came of it and the latest delete
        horizon of its kept batches."""
        cleaned, horizon = None, -1
        for n, source in enumerate(group):
            filtered = self._filter(source, batch_filter, keep_last=n == len(group) - 1)
            horizon = max(horizon, filtered.horizon)
            if cleaned is None and not filtered.changed and len(group) == 1:
                return GroupOutcome.UNCHANGED, horizon
            if cleaned is None:
                cleaned = self._new_segment(group)
            kept = filtered.batches
            if kept is not None:
                cleaned.stage(kept.data, kept.positions, kept.sizes, kept.last_offsets, kept.max_timestamps)
                cleaned.write()
                self.result.bytes_written += len(kept.data)
            for aborted in source.txn_index.entries:  # read_committed readers still need them
                cleaned.txn_index.append(aborted)
        assert cleaned is not None  # a group holds a segment at least
        return self._swap(group, cleaned), horizon

    def _filter(self, segment: LogSegment, batch_filter: BatchFilter, keep_last: bool) -> FilteredSegment:
        view, scan = scan_segment(segment, verify_crc=id(segment) not in self._verified)
        res = self.result
        res.segments_read += 1
        res.bytes_read += len(view)
        res.records_read += int(scan.record_count.sum())
        filtered = batch_filter.filter(view, scan, keep_last)
        res.records_kept += filtered.records_kept
        res.tombstones_removed += filtered.tombstones_removed
        res.empty_batches += filtered.empty_batches
        return filtered

    def _new_segment(self, group: list) -> LogSegment:
        base = group[0].base_offset
        for suffix in filenames.SEGMENT_SUFFIXES:
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

    def _swap(self, group: list, cleaned: LogSegment) -> GroupOutcome:
        cleaned.seal_time_index()
        cleaned.flush()
        # Retention by mtime must see the group's age, not the pass's (as Kafka does).
        mtime = max(os.stat(s.log_path).st_mtime_ns for s in group)
        os.utime(cleaned.log_path, ns=(mtime, mtime))
        cleaned.change_suffix(filenames.SWAP_SUFFIX)
        checkpoints.fsync_dir(self.log.directory)
        if not self.log.replace_segments(group, cleaned):
            cleaned.close_and_unlink()
            return GroupOutcome.LOG_CHANGED
        self.result.groups_swapped += 1
        self.result.swapped_bases.append(cleaned.base_offset)
        return GroupOutcome.SWAPPED


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
