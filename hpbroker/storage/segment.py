"""One log segment: a ``.log`` file of record batches and its two sparse indexes.

The ``.log`` file holds whole record batches back to back (layout in
``hpbroker.kernels.layout``); nothing frames them but their own length fields.
The segment is named after its base offset: every batch in it has offsets at or
above it and below the next segment's base.

Appending is two steps, so one request's batches cost one ``writev``:
``stage()`` queues bytes and their index entries in memory, ``write()`` hands
them to the kernel (page cache) and only then publishes the new size and index
entries.  A failed write (a full disk) truncates the file back and restores the
state of the last good write, so nothing half-written is ever visible.

Reads go through a read-only ``mmap`` of the written bytes and the batch-scan
kernel, which finds batch boundaries without copying.  ``recover()`` rebuilds
everything that is derived (indexes, next offset, largest timestamp) from the
``.log`` alone and cuts it after the last valid batch.
"""

import collections
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

from hpbroker.kernels import scan_batches
from hpbroker.kernels.batch_scan import (
    STOP_BAD_CRC,
    STOP_BAD_LENGTH,
    STOP_BAD_MAGIC,
    STOP_END,
    STOP_LIMIT,
    STOP_TORN,
)
from hpbroker.kernels.index_plan import plan_index_entries
from hpbroker.storage import filenames, space, stats
from hpbroker.storage.errors import SourceChangedError
from hpbroker.storage.index_file import IndexCorruptError
from hpbroker.storage.offset_index import OffsetIndex
from hpbroker.storage.recent_batches import NOT_COVERED, whole_batches
from hpbroker.storage.time_index import TimeIndex
from hpbroker.storage.txn_index import TransactionIndex

_EMPTY = np.zeros(0, np.uint8)
_IOV_MAX = 1024
RECENT_BATCHES = 16  # per active segment, published for readers in other workers
# Where the last reads beyond the recent batches ended, per segment: a follower
# further behind than those (under a producer faster than it, tens of megabytes)
# fetches next exactly where its last read ended, and is then found without the index.
READ_CURSORS = 8


class BatchLocation(NamedTuple):
    position: int
    size: int
    base_offset: int
    last_offset: int


@dataclass
class RecoveryResult:
    batches: int
    valid_bytes: int
    truncated_bytes: int
    reason: str  # why the valid prefix ended: "end", or what was wrong after it


@dataclass
class _TailState:
    """What the next append needs to know; restored wholesale after a failed write."""

    size: int = 0
    next_offset: int = 0
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    bytes_since_index_entry: int = 0
    first_batch_timestamp: int = -1  # Kafka's "rolling based timestamp"

    def copy(self) -> "_TailState":
        # spelled out: an append makes one, and dataclasses.replace walks the fields' metadata
        return _TailState(self.size, self.next_offset, self.max_timestamp, self.offset_of_max_timestamp,
                          self.bytes_since_index_entry, self.first_batch_timestamp)


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        suffix: str = "",
        reserve_ahead: bool = False,
    ):
        """``suffix`` (``.cleaned``) names a segment the cleaner is still writing.
        ``reserve_ahead``: this is a log's own segment, which large appends
        reserve disk space ahead of (``space.py``) and which gives it back when
        no longer appended to; never for a segment opened only to be read."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.suffix = suffix
        self.log_path = filenames.segment_file(directory, base_offset, filenames.LOG_SUFFIX) + suffix
        index_path = filenames.segment_file(directory, base_offset, filenames.INDEX_SUFFIX) + suffix
        time_index_path = filenames.segment_file(directory, base_offset, filenames.TIME_INDEX_SUFFIX) + suffix
        self.indexes_were_missing = not (os.path.exists(index_path) and os.path.exists(time_index_path))
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        opened = os.fstat(self.fd)
        self.identity = (opened.st_dev, opened.st_ino)  # the file these positions are in, for readers by path
        # (base offset, next offset, position, size) of the last batches written,
        # newest last: what a reader in another worker may locate without the index
        self.recent: collections.deque[tuple[int, int, int, int]] = collections.deque(maxlen=RECENT_BATCHES)
        self.recent_generation = 0  # moves whenever ``recent`` is cut: what was published of it no longer holds
        self._cursors: dict[int, int] = {}  # next offset -> position of its batch, where a read ended (READ_CURSORS)
        self._pending_batches: list[tuple[int, int, int, int]] = []
        self.offset_index = OffsetIndex(index_path, base_offset, max_index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, max_index_bytes)
        # aborted transactions whose marker is here (a file only once there is one)
        self.txn_index = TransactionIndex(
            filenames.segment_file(directory, base_offset, filenames.TXN_INDEX_SUFFIX) + suffix)
        self._state = _TailState(size=opened.st_size, next_offset=base_offset)
        self._staged = self._state.copy()
        self._pending: list = []
        self._pending_checks: list[Callable[[], bool]] = []  # true while what was staged from others' memory holds
        self._pending_offset_entries: list[tuple[int, int]] = []
        self._pending_time_entries: list[tuple[int, int]] = []
        self._map = None
        self._view = _EMPTY
        self.reserve_ahead = reserve_ahead
        self._reserved_to = 0  # where the space last reserved ends
        self._size_at_idle_check = -1  # the size the last give_back_if_idle saw
        # space may be allocated past the end, to give back (release_reserved): a crash may have left some
        self._holds_reserve = reserve_ahead and space.holds_more_than(opened)

    # --- state -------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes written to the file (readable by anyone)."""
        return self._state.size

    @property
    def staged_size(self) -> int:
        """Bytes including those staged but not yet written."""
        return self._staged.size

    @property
    def next_offset(self) -> int:
        """The offset after the last written batch."""
        return self._state.next_offset

    @property
    def max_timestamp(self) -> int:
        return self._state.max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._state.offset_of_max_timestamp

    @property
    def first_batch_timestamp(self) -> int:
        return self._staged.first_batch_timestamp

    def is_empty(self) -> bool:
        return self._staged.size == 0

    def indexes_full(self, extra_entries: int = 1) -> bool:
        pending = len(self._pending_offset_entries) + extra_entries
        return (
            len(self.offset_index) + pending > self.offset_index.max_entries
            or len(self.time_index) + pending > self.time_index.max_entries
        )

    # --- appending ---------------------------------------------------------
    def stage(self, data, positions, sizes, last_offsets, max_timestamps, first_offsets=None,
              unchanged: Callable[[], bool] | None = None) -> None:
        """Queue ``data`` (whole batches with offsets assigned) for the next ``write()``.

        ``positions`` are relative to ``data``; the other arrays are the batches'
        scan columns.  Nothing is visible to readers until ``write()``.  With
        ``first_offsets`` the batches join ``recent`` once written.
        ``unchanged``: see ``stage_one``.
        """
        if len(positions) == 0:
            return
        start = self._staged.size
        if first_offsets is not None:
            if len(positions) == 1:
                self._pending_batches.append((int(first_offsets[0]), int(last_offsets[0]) + 1,
                                              start + int(positions[0]), int(sizes[0])))
            else:
                self._pending_batches.extend(
                    (base, last + 1, start + position, size) for base, last, position, size in
                    zip(first_offsets.tolist(), last_offsets.tolist(), positions.tolist(), sizes.tolist()))
        self._plan_entries(np.asarray(positions, np.int64) + start, sizes, last_offsets, max_timestamps)
        self._pending.append(memoryview(data))
        if unchanged is not None:
            self._pending_checks.append(unchanged)
        self._staged.size = start + len(data)

    def stage_one(self, data, first_offset: int, last_offset: int, max_timestamp: int, *,
                  head: bytearray | None = None, unchanged: Callable[[], bool] | None = None) -> None:
        """``stage`` for a buffer holding exactly one batch, in scalars.

        ``head``: the batch's first bytes as they are to be written, in place
        of ``data``'s (memory the log may read but not write: another
        worker's).  ``unchanged``: asked once ``data`` is written and before
        anything is published; false means ``data`` changed under the write,
        which is then undone (``SourceChangedError``)."""
        start = self._staged.size
        size = len(data)
        self._pending_batches.append((first_offset, last_offset + 1, start, size))
        s = self._staged
        if s.size == 0 and s.first_batch_timestamp < 0:
            s.first_batch_timestamp = max_timestamp
        last_time = self._pending_time_entries[-1][0] if self._pending_time_entries else self.time_index.max_timestamp()
        self._plan_one(start, size, last_offset, max_timestamp, last_time)
        if head is None:
            self._pending.append(memoryview(data))
        else:
            self._pending += (memoryview(head), memoryview(data)[len(head):])
        if unchanged is not None:
            self._pending_checks.append(unchanged)
        s.size = start + size

    def _plan_entries(self, positions, sizes, last_offsets, max_timestamps) -> None:
        """Advance the staged tail state over these batches, queueing their index entries."""
        s = self._staged
        if len(positions) == 0:
            return
        if s.size == 0 and s.first_batch_timestamp < 0:
            s.first_batch_timestamp = int(max_timestamps[0])
        last_time = self._pending_time_entries[-1][0] if self._pending_time_entries else self.time_index.max_timestamp()
        if len(positions) == 1:  # a produce request's usual batch: the kernel's rule in scalars, without its setup
            self._plan_one(int(positions[0]), int(sizes[0]), int(last_offsets[0]), int(max_timestamps[0]), last_time)
            return
        plan = plan_index_entries(
            positions,
            sizes,
            last_offsets,
            max_timestamps,
            self.index_interval_bytes,
            bytes_since_last_entry=s.bytes_since_index_entry,
            max_timestamp=s.max_timestamp,
            offset_of_max_timestamp=s.offset_of_max_timestamp,
            last_time_entry=last_time,
        )
        self._pending_offset_entries.extend(zip(plan.offset_keys.tolist(), plan.offset_positions.tolist()))
        self._pending_time_entries.extend(zip(plan.time_stamps.tolist(), plan.time_offsets.tolist()))
        s.next_offset = int(last_offsets[-1]) + 1
        s.max_timestamp = plan.max_timestamp
        s.offset_of_max_timestamp = plan.offset_of_max_timestamp
        s.bytes_since_index_entry = plan.bytes_since_last_entry

    def _plan_one(self, position: int, size: int, last_offset: int, max_timestamp: int, last_time: int) -> None:
        """``plan_index_entries`` for one batch (``kernels/index_plan.py`` states the rule)."""
        s = self._staged
        if max_timestamp > s.max_timestamp:
            s.max_timestamp, s.offset_of_max_timestamp = max_timestamp, last_offset
        if s.bytes_since_index_entry > self.index_interval_bytes:
            self._pending_offset_entries.append((last_offset, position))
            if s.max_timestamp > last_time:
                self._pending_time_entries.append((s.max_timestamp, s.offset_of_max_timestamp))
            s.bytes_since_index_entry = 0
        s.bytes_since_index_entry += size
        s.next_offset = last_offset + 1

    def write(self) -> None:
        """Write what is staged to the file, then publish it.  On an OSError the
        file is cut back to its last good size and the error re-raised."""
        if not self._pending:
            return
        try:
            write_size = self._staged.size - self._state.size
            if self.reserve_ahead and write_size >= space.MIN_WRITE and self._staged.size > self._reserved_to:
                self._reserve_for(write_size)
            _write_all(self.fd, self._pending)
            if self._pending_checks and not all(check() for check in self._pending_checks):
                raise SourceChangedError("records were rewritten by the worker whose memory they were in "
                                         "while they were written")
            self._publish_entries()
        except OSError:
            self._discard_staged()
            raise
        self._pending.clear()

    def _reserve_for(self, write_size: int) -> None:
        length = space.length_for(write_size)
        if space.reserve(self.fd, self._state.size, length):
            self._reserved_to = self._state.size + length
            self._holds_reserve = True
        else:  # no support or no space here: this segment stops trying
            self.reserve_ahead = False

    def release_reserved(self) -> None:
        """Give back the disk space reserved past the end: the segment is no
        longer appended to (rolled, closed, moving to another worker)."""
        if self._holds_reserve and self.fd >= 0:
            space.release(self.fd, self._state.size)
        self._holds_reserve = False
        self._reserved_to = 0

    def give_back_if_idle(self) -> None:
        """Give back the space reserved past the end when nothing was appended
        since the last call (made at a long interval): a partition whose large
        appends stopped would otherwise hold it until its segment rolls, which
        may be days.  The next large append reserves again."""
        size = self._state.size
        if self._holds_reserve and not self._pending and size == self._size_at_idle_check:
            self.release_reserved()
        self._size_at_idle_check = size

    def _publish_entries(self) -> None:
        for offset, position in self._pending_offset_entries:
            self.offset_index.append(offset, position)
        for timestamp, offset in self._pending_time_entries:
            self.time_index.maybe_append(timestamp, offset)
        if self._pending_batches:
            self.recent.extend(self._pending_batches)
        self._clear_pending()
        self._state = self._staged.copy()

    def discard_staged(self) -> None:
        """Forget what is staged and not written (the append that staged it failed)."""
        self._discard_staged()

    def _discard_staged(self) -> None:
        os.ftruncate(self.fd, self._state.size)
        self.offset_index.truncate_to(self._state.next_offset)
        self.time_index.truncate_to(self._state.next_offset)
        self._clear_pending()
        self._staged = self._state.copy()

    def _clear_pending(self) -> None:
        self._pending.clear()
        self._pending_checks.clear()
        self._pending_batches.clear()
        self._pending_offset_entries.clear()
        self._pending_time_entries.clear()

    def seal_time_index(self) -> None:
        """Record the largest timestamp in the time index, as Kafka does when a
        segment is rolled or closed, so retention finds it after a restart."""
        if self._state.max_timestamp >= 0:
            self.time_index.maybe_append(self._state.max_timestamp, self._state.offset_of_max_timestamp)

    def flush(self) -> None:
        stats.timed_fsync(os.fsync, self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    # --- reading -----------------------------------------------------------
    def view(self) -> np.ndarray:
        """uint8 view of the written bytes (a read-only mmap, remapped as it grows)."""
        size = self._state.size
        if len(self._view) != size:
            if size == 0:
                self._map, self._view = None, _EMPTY
            elif self._map is None or len(self._map) < size:
                self._map = mmap.mmap(self.fd, size, access=mmap.ACCESS_READ)
                self._view = np.frombuffer(self._map, dtype=np.uint8)
            else:
                self._view = np.frombuffer(self._map, dtype=np.uint8, count=size)
        return self._view

    def _view_to(self, end: int) -> np.ndarray:
        """A view of the first ``end`` written bytes: the current map when it
        reaches that far, so reading older bytes of a growing segment does not
        map it anew after every write (a new map is faulted in page by page)."""
        if self._map is not None and len(self._map) >= end:
            return np.frombuffer(self._map, dtype=np.uint8, count=end)
        return self.view()

    def find_batch(self, offset: int) -> BatchLocation | None:
        """The first written batch whose last offset is >= ``offset``, or None."""
        if offset >= self._state.next_offset:
            return None
        view = self.view()
        keys = self.offset_index.keys()
        i = self.offset_index.floor(offset - self.base_offset)
        start = int(self.offset_index.values()[i]) if i >= 0 else 0
        # The next index entry's batch ends at or after ``offset``: scan up to it.
        end = int(self.offset_index.values()[i + 1]) if i + 1 < len(keys) else self._state.size
        scan = scan_batches(view, start, end, verify_crc=False)
        j = int(np.searchsorted(scan.last_offset, offset, side="left"))
        if j < len(scan.position):
            return _location(scan, j)
        if end < self._state.size:
            scan = scan_batches(view, end, self._state.size, verify_crc=False, max_batches=1)
            if len(scan.position):
                return _location(scan, 0)
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one: bool = True) -> tuple[int, int] | None:
        """``(position, length)`` of whole batches from the one holding ``offset``:
        at most ``max_bytes`` unless ``min_one`` and the first batch alone is larger,
        and none starting at or above ``max_offset``.  None when there is nothing.
        An offset among the recent batches (a follower or consumer at the tail) is
        located from them, one where an earlier read ended from there
        (``READ_CURSORS``); any other is scanned for."""
        found = self._read_recent(offset, max_bytes, max_offset, min_one)
        if found is NOT_COVERED:
            found = self._read_from_cursor(offset, max_bytes, max_offset, min_one)
        if found is not NOT_COVERED:
            return cast("tuple[int, int] | None", found)
        return self.read_scanned(offset, max_bytes, max_offset, min_one)

    def _read_recent(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool):
        """``read`` from ``recent`` alone, or ``NOT_COVERED`` when it cannot tell
        (the offset is older than the recent batches, or batches were written
        past them, which the scan would count)."""
        recent = self.recent
        if not recent or recent[-1][2] + recent[-1][3] != self._state.size:
            return NOT_COVERED
        return whole_batches(recent, offset, max_bytes, max_offset, min_one)

    def read_scanned(self, offset: int, max_bytes: int, max_offset: int | None = None,
                     min_one: bool = True) -> tuple[int, int] | None:
        """``read`` by the index and a scan of the segment, whatever the offset."""
        first = self.find_batch(offset)
        if first is None or (max_offset is not None and first.base_offset >= max_offset):
            return None
        end = min(self._state.size, first.position + max(max_bytes, 0))
        return self._whole_from(first, scan_batches(self.view(), first.position, end, verify_crc=False),
                                max_offset, min_one)

    def _read_from_cursor(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool):
        """``read`` from where an earlier read ended at ``offset`` (the batch
        there is the first whose last offset reaches it), or ``NOT_COVERED``
        when none did.  One scan, where the index needs two and then the read's."""
        position = self._cursors.get(offset)
        size = self._state.size
        if position is None or position >= size:
            return NOT_COVERED
        end = min(size, position + max(max_bytes, 0))
        scan = scan_batches(self._view_to(end), position, end, verify_crc=False)
        head = scan if len(scan.position) else scan_batches(self.view(), position, size, verify_crc=False,
                                                            max_batches=1)
        if not len(head.position):
            return NOT_COVERED
        first = _location(head, 0)
        if max_offset is not None and first.base_offset >= max_offset:
            return None
        return self._whole_from(first, scan, max_offset, min_one)

    def _whole_from(self, first: BatchLocation, scan, max_offset: int | None, min_one: bool):
        """The whole batches of ``scan`` (from ``first``, up to the byte limit),
        none at or beyond ``max_offset``; where they end is kept as a cursor."""
        count = len(scan.position)
        if max_offset is not None:
            count = int(np.searchsorted(scan.base_offset, max_offset, side="left"))
        if count:
            last = count - 1
            end = int(scan.position[last] + scan.size[last])
            self._keep_cursor(int(scan.last_offset[last]) + 1, end)
            return first.position, end - first.position
        if min_one:
            self._keep_cursor(first.last_offset + 1, first.position + first.size)
            return first.position, first.size
        return None

    def _keep_cursor(self, next_offset: int, position: int) -> None:
        cursors = self._cursors
        if next_offset not in cursors and len(cursors) >= READ_CURSORS:
            del cursors[next(iter(cursors))]  # the oldest
        cursors[next_offset] = position

    def read_bytes(self, position: int, length: int) -> bytes:
        return self.view()[position : position + length].tobytes()

    def find_batch_by_timestamp(self, timestamp: int, start_offset: int) -> BatchLocation | None:
        """The first batch at or after ``start_offset`` whose max timestamp is
        >= ``timestamp``, or None.  The time index bounds the scan on both sides:
        the entry below ``timestamp`` is where to start, the one after it
        (which reached a larger timestamp) where the answer must be found."""
        i = self.time_index.floor(timestamp)
        from_offset = self.base_offset + int(self.time_index.values()[i]) if i >= 0 else self.base_offset
        first = self.find_batch(max(from_offset, start_offset))
        if first is None:
            return None
        end = self._state.size
        if i + 1 < len(self.time_index):
            bound = self.find_batch(self.base_offset + int(self.time_index.values()[i + 1]))
            # A bound behind ``first`` (start_offset skipped past it) bounds nothing.
            if bound is not None and bound.position >= first.position:
                end = bound.position + bound.size
        scan = scan_batches(self.view(), first.position, end, verify_crc=False)
        hits = np.flatnonzero(scan.max_timestamp >= timestamp)
        return _location(scan, int(hits[0])) if len(hits) else None

    # --- loading and recovery ----------------------------------------------
    def load(self) -> None:
        """Adopt a segment trusted to be whole (below the recovery point):
        derive the tail state from the indexes and the bytes after the last
        entry.  Raises IndexCorruptError when the indexes do not fit the log."""
        size = self._state.size
        if self.indexes_were_missing and size:
            raise IndexCorruptError(f"{self.log_path}: index files are missing")
        self.offset_index.sanity_check(size)
        last_entry = self.offset_index.last_entry()
        start = last_entry[1] if last_entry else 0
        scan = scan_batches(self.view(), start, size, verify_crc=False)
        if scan.valid_end != size:
            raise IndexCorruptError(f"{self.log_path}: batches do not end at the end of the file")
        state = _TailState(size=size, next_offset=self.base_offset)
        if len(scan.position):
            state.next_offset = int(scan.last_offset[-1]) + 1
            first = scan_batches(self.view(), 0, size, verify_crc=False, max_batches=1)
            state.first_batch_timestamp = int(first.max_timestamp[0])
        state.bytes_since_index_entry = size - start
        self.time_index.sanity_check(state.next_offset - 1)
        ts, ts_offset = self.time_index.last_entry() or (-1, -1)
        state.max_timestamp, state.offset_of_max_timestamp = ts, self.base_offset + ts_offset if ts >= 0 else -1
        if len(scan.position):
            i = int(np.argmax(scan.max_timestamp))
            if scan.max_timestamp[i] > state.max_timestamp:
                state.max_timestamp = int(scan.max_timestamp[i])
                state.offset_of_max_timestamp = int(scan.last_offset[i])
        self._set_state(state)

    def recover(self, max_offset: int | None = None) -> RecoveryResult:
        """Validate every batch (CRC, length, offsets inside this segment and
        increasing), cut the file after the last valid one (and before any batch
        reaching ``max_offset``), and rebuild both indexes from what is left."""
        size = os.fstat(self.fd).st_size
        self._state.size = size
        self._clear_pending()
        scan = scan_batches(self.view(), 0, size)
        count, reason = len(scan.position), _STOP_REASONS.get(scan.stop, "invalid batch")
        order_ok = scan.base_offset >= self.base_offset
        order_ok[1:] &= scan.base_offset[1:] > scan.last_offset[:-1]
        order_ok &= scan.last_offset >= scan.base_offset
        if not order_ok.all():
            count, reason = int(np.argmin(order_ok)), "offsets out of order"
        if max_offset is not None:
            below = int(np.searchsorted(scan.last_offset[:count], max_offset, side="left"))
            if below < count:
                count, reason = below, f"truncated to offset {max_offset}"
        valid = int(scan.position[count - 1] + scan.size[count - 1]) if count else 0
        if valid < size:
            self._map, self._view = None, _EMPTY
            os.ftruncate(self.fd, valid)
        self.offset_index.reset()
        self.time_index.reset()
        self._set_state(_TailState(next_offset=self.base_offset))
        head = slice(0, count)
        self._plan_entries(scan.position[head], scan.size[head], scan.last_offset[head], scan.max_timestamp[head])
        self._staged.size = valid
        self._publish_entries()
        self.seal_time_index()  # as Kafka's recovery does: the time index ends on the largest timestamp
        self.txn_index.truncate_to(self.next_offset)  # aborts whose marker was cut (replay adds back the rest)
        return RecoveryResult(count, valid, size - valid, "end" if valid == size else reason)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns bytes removed."""
        before = self._state.size
        self.recover(max_offset=offset)
        return before - self._state.size

    def _set_state(self, state: _TailState) -> None:
        self._state = state
        self._staged = state.copy()
        self.recent.clear()  # cut or recovered: what was recent may be gone
        self.recent_generation += 1
        self._cursors.clear()  # and where reads ended may be gone too

    # --- lifecycle ---------------------------------------------------------
    def paths(self) -> list[str]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def write_index_entries(self) -> None:
        """Write the index entries kept in memory (``IndexFile.write_entries``), without an fsync."""
        self.offset_index.write_entries()
        self.time_index.write_entries()

    def close(self) -> None:
        self.release_reserved()
        self._map, self._view = None, _EMPTY
        self.offset_index.close()
        self.time_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def mark_deleted(self) -> None:
        """Rename the files to ``*.deleted``; open descriptors keep working for
        readers still holding this segment until ``close_and_unlink``."""
        self.log_path = _rename(self.log_path)
        self.offset_index.rename(self.offset_index.path + filenames.DELETED_SUFFIX)
        self.time_index.rename(self.time_index.path + filenames.DELETED_SUFFIX)
        self.txn_index.rename(self.txn_index.path + filenames.DELETED_SUFFIX)

    def change_suffix(self, suffix: str) -> None:
        """Rename the files from the current transient suffix to ``suffix``
        (Kafka's changeFileSuffixes: ``.cleaned`` -> ``.swap`` -> none).  The
        ``.log`` goes last, so a crash between renames leaves at worst index
        files that recovery deletes and rebuilds."""
        def renamed(path: str) -> str:
            return path[: len(path) - len(self.suffix)] + suffix

        self.offset_index.rename(renamed(self.offset_index.path))
        self.time_index.rename(renamed(self.time_index.path))
        self.txn_index.rename(renamed(self.txn_index.path))
        new_log_path = renamed(self.log_path)
        os.rename(self.log_path, new_log_path)
        self.log_path, self.suffix = new_log_path, suffix

    def close_and_unlink(self) -> None:
        self.close()
        for path in self.paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


_STOP_REASONS = {
    STOP_END: "end",
    STOP_LIMIT: "end",
    STOP_TORN: "torn write (incomplete batch at the end)",
    STOP_BAD_LENGTH: "impossible batch length",
    STOP_BAD_MAGIC: "unknown magic byte",
    STOP_BAD_CRC: "CRC mismatch",
}


def _location(scan, i: int) -> BatchLocation:
    return BatchLocation(int(scan.position[i]), int(scan.size[i]), int(scan.base_offset[i]), int(scan.last_offset[i]))


def _rename(path: str) -> str:
    new_path = path + filenames.DELETED_SUFFIX
    os.rename(path, new_path)
    return new_path


def _write_all(fd: int, buffers: list) -> None:
    """writev until every byte is out (a write may be partial)."""
    pending = [b for b in buffers if len(b)]
    while pending:
        written = os.writev(fd, pending[:_IOV_MAX])
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            pending.pop(0)
        if written:
            pending[0] = pending[0][written:]
