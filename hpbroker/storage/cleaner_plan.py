"""Which part of a compacted log a cleaning pass may rewrite (the part of
Kafka's LogCleanerManager that picks what to clean).

* **Range.**  The first dirty offset is the cleaner checkpoint (reset to the
  log start when outside the log); the first uncleanable offset is the
  lowest of the active segment's base, the written offset, the first offset
  of an open transaction, and the base of the first segment holding a record
  younger than ``min.compaction.lag.ms`` -- rounded down to a segment base,
  since segments are cleaned whole.  Everything below the first dirty offset
  was cleaned before ("clean"), the rest up to the uncleanable offset is dirty.
* **Eligibility.**  A log is worth a pass when its dirty ratio (dirty bytes
  over cleanable bytes) exceeds ``min.cleanable.dirty.ratio``, when its oldest
  dirty record is older than ``max.compaction.lag.ms``, or when the tombstones
  the last pass kept have reached their delete horizon.
* **Groups.**  The segments a pass rewrites go in groups whose summed sizes
  and index entries fit one segment (Kafka's ``groupSegmentsBySize``).
"""

import bisect
from dataclasses import dataclass

from hpbroker.storage.log import largest_timestamp

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


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


def first_unstable_offset(partition_log) -> int:
    """The first offset of the oldest open transaction (no limit when none is)."""
    firsts = [e.current_txn_first_offset for e in partition_log.producer_state.producers.values()
              if e.current_txn_first_offset >= 0]
    return min(firsts, default=_INT64_MAX)


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
    uncleanable = min(segments[-1].base_offset, written, first_unstable_offset(partition_log))
    if config.min_compaction_lag_ms > 0:
        for s in segments[:-1]:
            if s.next_offset > first_dirty and largest_timestamp(s) > now - config.min_compaction_lag_ms:
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


def group_by_size(segments: list, config) -> list[list]:
    """Consecutive segments whose summed bytes and index entries fit one
    segment, and whose offsets fit int32 deltas from the group's base."""
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
