"""The ``.timeindex`` file: a sparse map from timestamp to offset.

Layout: 12-byte entries, big-endian::

    0 timestamp      int64   the largest timestamp seen in the segment so far
    8 relativeOffset int32   offset of the batch holding it - segment base offset

Timestamps strictly increase: an entry is only added (at the same moments as an
offset index entry, and once more when the segment is rolled) when the segment's
maximum timestamp grew.  The last entry therefore carries the segment's largest
timestamp, which time-based retention reads.  Rebuilt from the .log after a crash.
"""

import numpy as np

from hpbroker.storage.index_file import IndexCorruptError, IndexFile


class TimeIndex(IndexFile):
    DTYPE = np.dtype([("key", ">i8"), ("value", ">i4")])

    def maybe_append(self, timestamp: int, offset: int) -> None:
        last = self.last_entry()
        if last is None or timestamp > last[0]:
            self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry at or below ``timestamp``;
        ``(-1, base_offset)`` when there is none."""
        i = self.floor(timestamp)
        if i < 0:
            return -1, self.base_offset
        return int(self.keys()[i]), self.base_offset + int(self.values()[i])

    def max_timestamp(self) -> int:
        last = self.last_entry()
        return last[0] if last else -1

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at offsets >= ``offset``."""
        values = self.values()
        keep = int(np.searchsorted(values, offset - self.base_offset, side="left"))
        self.truncate_entries(keep)

    def sanity_check(self, last_offset: int) -> None:
        last = self.last_entry()
        if last is not None and self.base_offset + last[1] > last_offset:
            raise IndexCorruptError(f"{self.path}: an entry points past the last offset {last_offset}")
