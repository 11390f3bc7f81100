"""The ``.index`` file: a sparse map from offset to byte position in the segment.

Layout: 8-byte entries, big-endian::

    0 relativeOffset int32   offset - segment base offset
    4 position       int32   byte position of a batch in the .log file

An entry ``(o, p)`` says the batch at position ``p`` ends at offset ``o``, so
every offset above ``o`` lies at or after ``p``.  One entry is added once more
than ``index.interval.bytes`` were appended since the previous one (the first
batch of a segment never gets one).  Rebuilt from the .log after a crash.
"""

import numpy as np

from hpbroker.storage.index_file import IndexCorruptError, IndexFile


class OffsetIndex(IndexFile):
    DTYPE = np.dtype([("key", ">i4"), ("value", ">i4")])

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """A byte position at or before the batch holding ``offset`` (0 if none is indexed)."""
        i = self.floor(offset - self.base_offset)
        return int(self.values()[i]) if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        keys = self.keys()
        self.truncate_entries(int(np.searchsorted(keys, offset - self.base_offset, side="left")))

    def sanity_check(self, log_size: int) -> None:
        """Raise IndexCorruptError when the entries cannot belong to a log of this size."""
        if len(self) and int(self.values()[-1]) >= log_size:
            raise IndexCorruptError(f"{self.path}: an entry points past the end of the log ({log_size} bytes)")
