"""Disk space allocated ahead of an active segment's end, for large appends.

A buffered write that extends a file into blocks not yet allocated makes the
file system do work for every page: ext4's delayed allocation reserves each
page, charges it to the quota and records it in the extent status tree.
Allocating the next few megabytes in one ``fallocate`` call first, with
``FALLOC_FL_KEEP_SIZE`` so the file's size does not change (readers, recovery,
retention and the Spark source see exactly what was written), takes that work
off every later write: a 1 MiB append into the page cache costs about a
quarter less CPU here (bench/RESULTS.md). The space past the end is given back
(``ftruncate`` to the size) when the segment stops being appended to.

Only large writes reserve: below ``MIN_WRITE`` the extra system call costs
what it saves, and a partition of small batches would hold disk space for
nothing. A reservation is at most ``MAX_AHEAD`` past a segment's end, so a
broker holds at most that per partition taking megabyte appends.
"""

from __future__ import annotations

import ctypes
import os

MIN_WRITE = 64 << 10  # smaller writes reserve nothing
AHEAD_WRITES = 4  # a reservation covers this many writes of the size that made it
MAX_AHEAD = 8 << 20
_KEEP_SIZE = 0x01  # FALLOC_FL_KEEP_SIZE


def _load_fallocate():
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):  # not Linux's C library: no reservations
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_fallocate = _load_fallocate()


def length_for(write_size: int) -> int:
    """How many bytes to reserve from a segment's end for a write of
    ``write_size`` bytes (at least ``MIN_WRITE``: the writer asks only for
    those) that passes what is reserved."""
    return max(write_size, min(write_size * AHEAD_WRITES, MAX_AHEAD))


def reserve(fd: int, start: int, length: int) -> bool:
    """Allocate ``[start, start + length)`` of the file without changing its
    size.  False when the file system does not (no support, no space): the
    write goes ahead unreserved and meets whatever error it would have."""
    if _fallocate is None:
        return False
    return _fallocate(fd, _KEEP_SIZE, start, length) == 0


def release(fd: int, size: int) -> None:
    """Give back what is allocated past ``size`` (the file's size: nothing
    written is cut).  A failure only leaves the space with the file."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def holds_more_than(stat: os.stat_result, slack: int = 1 << 20) -> bool:
    """The file has blocks allocated well past its size (a reservation left
    by a crash, or the file system's own preallocation)."""
    return stat.st_blocks * 512 > stat.st_size + slack
