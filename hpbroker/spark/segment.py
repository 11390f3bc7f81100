"""Read-only access to one segment: an mmap of its ``.log`` and its sparse ``.index``.

No lock is taken and nothing is written.  A segment can change under a reader:

* the active segment grows (new bytes past the size we mapped are not seen);
* retention renames it ``<name>.deleted`` before unlinking it (we follow the
  rename, and the open mapping keeps the bytes alive after the unlink);
* the cleaner swaps in a compacted copy, which moves every byte position.

So byte positions are only hints: a reader locates data by offset, checks
that a hinted position starts a whole, CRC-valid batch, and otherwise scans the
segment from its first byte (framing only: it hops from length to length).

``.index`` layout (Kafka's OffsetIndex): 8-byte entries, big-endian int32
offset relative to the segment base and int32 byte position.  An active
segment's index is preallocated and zero-filled past its last entry, so only
the strictly increasing prefix is used.
"""

import mmap
import os

import numpy as np

from hpbroker.kernels import scan_batches
from hpbroker.storage import filenames

_INDEX_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_EMPTY = np.zeros(0, np.uint8)


class SegmentFile:
    """A read-only mapping of a ``.log``; ``view`` is a uint8 array over it."""

    def __init__(self, partition_path: str, base: int):
        self.base = base
        self.path = filenames.segment_file(partition_path, base, filenames.LOG_SUFFIX)
        self._mmap = None
        fd = _open_following_delete(self.path)
        try:
            size = os.fstat(fd).st_size
            if size:
                self._mmap = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.view = np.frombuffer(self._mmap, np.uint8) if self._mmap is not None else _EMPTY

    def close(self) -> None:
        self.view = _EMPTY
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a caller still holds a view; the GC unmaps it later
                pass
            self._mmap = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_position(self, offset: int, hint: int = 0) -> int:
        """A byte position at or before the batch holding ``offset``.

        ``hint`` (from the index or a plan) is used when a whole, CRC-valid
        batch starting at or below ``offset`` sits there; otherwise a framing
        scan from byte 0 finds the batch.
        """
        view = self.view
        if 0 < hint < view.shape[0]:
            one = scan_batches(view, hint, verify_crc=True, max_batches=1)
            if len(one.base_offset) == 1 and one.base_offset[0] <= offset:
                return hint
        if offset <= self.base or view.shape[0] == 0:
            return 0
        scan = scan_batches(view, 0, verify_crc=False)
        i = int(np.searchsorted(scan.last_offset, offset, side="left"))
        return int(scan.position[i]) if i < len(scan.position) else scan.valid_end


def _open_following_delete(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        try:
            return os.open(path + filenames.DELETED_SUFFIX, os.O_RDONLY)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"segment {path} is gone (retention or compaction removed it after the read was planned)") from None


def read_index(partition_path: str, base: int) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, positions)`` of the usable ``.index`` entries, absolute offsets, int64."""
    path = filenames.segment_file(partition_path, base, filenames.INDEX_SUFFIX)
    try:
        raw = np.fromfile(path, np.uint8)
    except (FileNotFoundError, OSError):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    entries = raw[: len(raw) // _INDEX_ENTRY.itemsize * _INDEX_ENTRY.itemsize].view(_INDEX_ENTRY)
    rel = entries["relative_offset"].astype(np.int64)
    pos = entries["position"].astype(np.int64)
    if len(rel) > 1:
        # Keep the prefix that strictly increases: the zero fill ends it.
        bad = np.flatnonzero((np.diff(rel) <= 0) | (np.diff(pos) <= 0))
        if len(bad):
            rel, pos = rel[: bad[0] + 1], pos[: bad[0] + 1]
    if len(rel) and rel[0] == 0 and pos[0] == 0:
        rel, pos = rel[1:], pos[1:]
    return rel + base, pos


def index_lookup(offsets: np.ndarray, positions: np.ndarray, target: int) -> int:
    """Position of the largest index entry at or below ``target`` (0 when none)."""
    i = int(np.searchsorted(offsets, target, side="right")) - 1
    return int(positions[i]) if i >= 0 else 0
