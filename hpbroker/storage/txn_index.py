"""A segment's ``.txnindex``: the aborted transactions whose ABORT marker it holds.

A read_committed consumer is told, with each fetch, which producers' records
in the range it got belong to aborted transactions, so it can drop them; this
index is where the broker finds them without reading the log.

Kafka's layout (its AbortedTxn): 34-byte entries back to back, big-endian,
no header::

    0  version           int16   0
    2  producerId        int64
    10 firstOffset       int64   the transaction's first offset
    18 lastOffset        int64   the offset of its ABORT marker
    26 lastStableOffset  int64   the partition's LSO when the marker was written

Entries go in marker order (``lastOffset`` strictly rising). The file is made
at a segment's first abort only, so most segments have none. A torn last
entry (a crash mid-write) is ignored and cut at the next write. Replaying the
log (recovery, a truncation's reload) offers the aborts again; one at or below
the last entry's marker is already here and is skipped.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

VERSION = 0
ENTRY = struct.Struct(">hqqqq")
assert ENTRY.size == 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # its ABORT marker
    last_stable_offset: int


class TransactionIndex:
    """One segment's aborted transactions, kept in memory (a segment has few)
    and appended to its file as they come."""

    def __init__(self, path: str):
        self.path = path
        self.entries: list[AbortedTxn] = _read(path)
        # changed since the last fsync (most segments never are); at first maybe
        # (a predecessor killed before its fsync left pages only the cache holds)
        self._dirty = True

    @property
    def last_marker(self) -> int:
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> bool:
        """Add ``txn``; False (nothing written) when its marker is not after the last one's."""
        if txn.last_offset <= self.last_marker:
            return False
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            data = ENTRY.pack(VERSION, *txn)
            position = len(self.entries) * ENTRY.size  # over a torn entry, if one was left
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, position + len(data) - len(view)):]
            os.ftruncate(fd, position + len(data))
        finally:
            os.close(fd)
        self.entries.append(txn)
        self._dirty = True
        return True

    def truncate_to(self, offset: int) -> None:
        """The log now ends before ``offset``: drop the aborts whose marker is gone."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        if os.path.exists(self.path):
            os.truncate(self.path, len(keep) * ENTRY.size)
            self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions that may hold records in ``[fetch_offset,
        upper_bound)``, and whether the search is complete: True once an entry's
        LSO reaches ``upper_bound`` (no transaction open at the end of the range
        was open before that abort, so later segments cannot add any)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def flush(self) -> None:
        if not self._dirty:
            return
        self._dirty = False  # before the fsync: a write during it is left for the next flush
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # none yet, or renamed for deletion by the owner while a background flush ran
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path


def _read(path: str) -> list[AbortedTxn]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    usable = len(data) - len(data) % ENTRY.size
    entries = []
    for at in range(0, usable, ENTRY.size):
        _version, *fields = ENTRY.unpack_from(data, at)
        entries.append(AbortedTxn(*fields))
    return entries
