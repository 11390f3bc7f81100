"""A log's roll and time flushes, fsynced off the thread that appends.

A roll asks for the segment it closed to be fsynced, and ``flush.ms`` for
everything written; neither has an acknowledgement waiting on it, so, as in
Kafka (whose scheduler thread does both), the owner's event loop must not
stall on them: an fsync of a 1 GiB segment takes a disk seconds, and every
connection of that worker would wait that long.  The owner hands the
segments to an executor and goes on appending; it learns the outcome in a
later ``tick()`` and only then moves its flushed offset (the recovery point),
so the checkpoints never claim more than the disk holds.

``flush.messages`` stays inline: there an acknowledgement does wait on it.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Executor, Future
from typing import NamedTuple

from hpbroker.storage import checkpoints

log = logging.getLogger(__name__)


class FlushJob(NamedTuple):
    """Segments being fsynced: once done, everything below ``target`` is on disk."""

    target: int
    future: Future


def start(executor: Executor, name: str, target: int, segments, snapshot: str | None) -> FlushJob:
    return FlushJob(target, executor.submit(fsync_all, name, segments, snapshot))


def fsync_all(name: str, segments, snapshot: str | None) -> None:
    """fsync each segment's files (OSError: the log's storage failed), then the
    producer snapshot a roll wrote unsynced."""
    for segment in segments:
        segment.flush()
    if snapshot is not None:
        fsync_snapshot(name, snapshot)


def fsync_snapshot(name: str, path: str) -> None:
    """The snapshot file and its directory entry.  A failure only means
    replaying from an older snapshot after a power cut: logged, not raised."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # already deleted by retention or a reload
    try:
        os.fsync(fd)
        checkpoints.fsync_dir(os.path.dirname(path))
    except OSError as exc:
        log.warning("%s: fsync of %s failed: %s", name, path, exc)
    finally:
        os.close(fd)
