"""A log's slow file work, done off the thread that appends: the fsyncs a
roll or ``flush.ms`` asks for, unlinking segments whose delete delay has
passed, and removing a deleted partition's directory.

Nobody's acknowledgement waits on any of them, so, as in Kafka (whose
scheduler threads do them), the owner's event loop must not stall on them:
an fsync of a 1 GiB segment takes a disk seconds, and unlinking one that is
still in the page cache takes the kernel hundreds of milliseconds; every
connection of that worker would wait that long.  The owner hands the work to an
executor and goes on appending.  It learns a flush's outcome in a later
``tick()`` and only then moves its flushed offset (the recovery point), so
the checkpoints never claim more than the disk holds.

``flush.messages`` is not done here: there an acknowledgement waits on it,
and a wake-up across threads (and the GIL) would cost the answer more than
the fsync.  It is done inline, or, for client produces, once per turn of the
owner's loop for all of the turn's writes (a group commit, ``Log.append``).
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
    """fsync the producer snapshot a roll wrote unsynced, if any, then each
    segment's files (OSError: the log's storage failed)."""
    if snapshot is not None:
        fsync_snapshot(name, snapshot)
    for segment in segments:
        segment.flush()


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


def unlink_segments(name: str, segments) -> None:
    """Close and remove segments nobody reads any more (their delete delay
    passed); a failure leaves a ``.deleted`` file for the next start to remove."""
    for segment in segments:
        try:
            segment.close_and_unlink()
        except OSError as exc:
            log.warning("%s: could not remove segment %d: %s", name, segment.base_offset, exc)
