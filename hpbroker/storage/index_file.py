"""An append-only file of fixed-size, big-endian (key, value) entries with sorted keys.

The base of Kafka's two sparse segment indexes.  The file holds exactly the
entries written (Kafka preallocates and trims on close; a file from an unclean
Kafka shutdown may still carry zero padding, which ``load`` cuts off).  The
entries are mirrored in native int64 numpy arrays, loaded on first use, so a
lookup is one ``searchsorted``.

New entries go to the arrays at once and to the file in one ``write`` at
the next ``flush`` or ``close``, or when the log rolls the segment or hands
the partition to another worker (``write_entries``): an entry per produced
batch, each its own system call, cost as much as appending the batch.  An
index file is no more than a hint to anyone who reads it while the segment
grows (Kafka's is preallocated and zero-filled past its last entry); a
process killed before writing its entries leaves a shorter index, and every
segment not yet flushed is rebuilt by recovery at the next start anyway.

A subclass declares ``DTYPE`` (a structured big-endian dtype with fields
``key`` and ``value``).
"""

import logging
import os
import threading

import numpy as np

log = logging.getLogger(__name__)


class IndexCorruptError(ValueError):
    """An index file is inconsistent with its segment; it should be rebuilt."""


class IndexFile:
    DTYPE: np.dtype  # set by subclasses

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, *, read_only: bool = False):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.DTYPE.itemsize)
        self.read_only = read_only
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT | os.O_APPEND
        self._fd = os.open(path, flags, 0o644)
        self._keys = None  # int64 arrays with spare capacity; None until loaded
        self._values = None
        self._count = 0
        self._written = 0  # entries in the file; the rest are only in the arrays
        self._last: tuple[int, int] | None = None  # the last entry as ints, asked on every append
        # a background flush writes entries beside the loop thread appending more
        self._write_lock = threading.Lock()
        # written since the last fsync: a flush of an unchanged index (most of
        # them: an entry goes in only every index.interval.bytes) is skipped.
        # At first maybe (a predecessor killed before its fsync left pages only
        # the cache holds)
        self._dirty = not read_only

    # --- loading ---------------------------------------------------------
    def _load(self) -> None:
        if self._keys is not None:
            return
        size = os.fstat(self._fd).st_size
        raw = np.fromfile(self.path, dtype=self.DTYPE, count=size // self.DTYPE.itemsize)
        keys = raw["key"].astype(np.int64)
        values = raw["value"].astype(np.int64)
        count = self._valid_prefix(keys, values)
        if count * self.DTYPE.itemsize != size and not self.read_only:
            os.ftruncate(self._fd, count * self.DTYPE.itemsize)
            self._dirty = True
        capacity = max(16, count * 2)
        self._keys = np.zeros(capacity, np.int64)
        self._values = np.zeros(capacity, np.int64)
        self._keys[:count] = keys[:count]
        self._values[:count] = values[:count]
        self._count = self._written = count
        self._last = (int(keys[count - 1]), int(values[count - 1])) if count else None

    @staticmethod
    def _valid_prefix(keys: np.ndarray, values: np.ndarray) -> int:
        """Entries up to the first that breaks key order or is zero padding."""
        if len(keys) == 0:
            return 0
        bad = np.zeros(len(keys), dtype=bool)
        bad[1:] = keys[1:] <= keys[:-1]
        bad |= (keys == 0) & (values == 0)
        hits = np.flatnonzero(bad)
        return int(hits[0]) if len(hits) else len(keys)

    # --- reading ---------------------------------------------------------
    def __len__(self) -> int:
        self._load()
        return self._count

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def keys(self) -> np.ndarray:
        self._load()
        assert self._keys is not None
        return self._keys[: self._count]

    def values(self) -> np.ndarray:
        self._load()
        assert self._values is not None
        return self._values[: self._count]

    def last_entry(self) -> tuple[int, int] | None:
        self._load()
        return self._last

    def floor(self, key: int) -> int:
        """Index of the last entry whose key is <= key, or -1."""
        return int(np.searchsorted(self.keys(), key, side="right")) - 1

    # --- writing ---------------------------------------------------------
    def _append(self, key: int, value: int) -> None:
        self._load()
        assert self._keys is not None and self._values is not None
        if self._last is not None and key <= self._last[0]:
            raise IndexCorruptError(f"{self.path}: entry key {key} is not above the last {self._last[0]}")
        if self._count >= self.max_entries:
            raise IndexCorruptError(f"{self.path}: index is full ({self.max_entries} entries)")
        if self._count == len(self._keys):
            self._keys = np.concatenate([self._keys, np.zeros_like(self._keys)])
            self._values = np.concatenate([self._values, np.zeros_like(self._values)])
        self._dirty = True
        self._keys[self._count] = key
        self._values[self._count] = value
        self._last = (key, value)
        self._count += 1  # last: a writer on another thread reads the count before the arrays

    def write_entries(self) -> None:
        """Write the entries only the arrays hold to the file, in one call."""
        with self._write_lock:
            count = self._count
            if count <= self._written:
                return
            keys, values = self._keys, self._values
            assert keys is not None and values is not None
            entries = np.empty(count - self._written, dtype=self.DTYPE)
            entries["key"] = keys[self._written:count]
            entries["value"] = values[self._written:count]
            data = entries.tobytes()
            done = 0
            try:
                while done < len(data):
                    done += os.write(self._fd, data[done:])
            except OSError:
                if done:  # no torn entry for the next write to follow
                    os.ftruncate(self._fd, self._written * self.DTYPE.itemsize)
                raise
            self._written = count

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        self._load()
        with self._write_lock:
            if count < self._count:
                self._count = count
                self._dirty = True
                assert self._keys is not None and self._values is not None
                self._last = (int(self._keys[count - 1]), int(self._values[count - 1])) if count else None
            if count < self._written:
                self._written = count
                os.ftruncate(self._fd, count * self.DTYPE.itemsize)

    def reset(self) -> None:
        self.truncate_entries(0)

    def flush(self) -> None:
        if self._dirty:
            self._dirty = False  # before the fsync: a write during it is left for the next flush
            try:
                self.write_entries()
                os.fsync(self._fd)
            except OSError:
                self._dirty = True
                raise

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            if not self.read_only:
                self.write_entries()
        except OSError as exc:  # a shorter index is still a valid one: lookups scan further
            log.warning("%s: could not write the last index entries: %s", self.path, exc)
        finally:
            os.close(self._fd)
            self._fd = -1

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path
