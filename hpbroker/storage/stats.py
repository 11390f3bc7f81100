"""Timings the storage layer reports to whoever runs it.

Storage imports nothing of the broker; the broker installs observers here
(its metrics), and without one a report costs a ``None`` check.
"""

import time

fsync_observer = None  # callable(seconds), set by the broker


def timed_fsync(fsync, fd: int) -> None:
    """``fsync(fd)``, reporting how long it took."""
    if fsync_observer is None:
        fsync(fd)
        return
    start = time.perf_counter()
    fsync(fd)
    fsync_observer(time.perf_counter() - start)
