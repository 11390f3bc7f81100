"""A partition's leader epoch cache and its ``leader-epoch-checkpoint`` file.

Each entry says that from ``start_offset`` on, the log was written by the
leader of ``epoch`` (KIP-101).  A follower asks its new leader where its own
latest epoch ends there (OffsetForLeaderEpoch) and cuts its log at that point
instead of trusting its high watermark; the answer comes from this cache
(``end_offset_for``, Kafka's ``LeaderEpochFileCache.endOffsetFor``).

Rules, as Kafka's: epochs strictly increase and start offsets never decrease
from one entry to the next; an epoch is recorded at the first batch that
carries it, and only when it is newer than the latest (a negative epoch marks
a batch from before epochs and is never recorded); cutting the log at ``o``
forgets the epochs starting at or after ``o``.

File ``<partition dir>/leader-epoch-checkpoint``, Kafka's text checkpoint
format (``checkpoints.py``), oldest entry first::

    0          <- version
    2          <- number of entries
    0 0        <- "epoch start_offset"
    2 5

It is rewritten whole on every change: to ``leader-epoch-checkpoint.tmp``,
fsynced, renamed over the old file, the directory fsynced, so a crash leaves
the old list or the new one.  A new epoch's entry is written before the
batches that start it, so after a crash the file may name epochs past the
recovered log end: opening drops them (``log_loader.py``).

``LeaderEpochCache`` is the state alone; ``read`` and ``write`` are the file.
"""

from typing import Iterable

from hpbroker.storage import checkpoints

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, entries: Iterable[tuple[int, int]] = ()):
        self._entries = [(int(epoch), int(start)) for epoch, start in entries]

    @property
    def entries(self) -> list[tuple[int, int]]:
        """``[(epoch, start_offset), ...]``, oldest first (a copy)."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def __len__(self) -> int:
        return len(self._entries)

    def assign(self, epoch_starts: Iterable[tuple[int, int]]) -> bool:
        """Note ``(epoch, base offset)`` of appended batches, in log order;
        True when an epoch was new (the file must be written again)."""
        changed = False
        for epoch, start in epoch_starts:
            if epoch > self.latest_epoch:  # also skips negative (pre-epoch) batches
                self._entries.append((epoch, start))
                changed = True
        return changed

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log now ends at ``end_offset``: forget the epochs starting at or
        after it.  True when any went."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        changed = len(kept) != len(self._entries)
        self._entries = kept
        return changed

    def end_offset_for(self, requested: int, current_epoch: int, log_end: int) -> tuple[int, int]:
        """``(epoch, end offset)`` answering OffsetForLeaderEpoch: the largest
        known epoch <= ``requested`` and the start of the next epoch (``log_end``
        for the latest one), or ``(-1, -1)`` for an undefined epoch or one
        newer than any known.  A leader holds its ``current_epoch`` from
        ``log_end`` on even before it appends in it.  A requested epoch older
        than every known one answers itself with the first known start: the
        history before that is gone from the log anyway."""
        epochs = self._entries
        if not epochs or current_epoch > epochs[-1][0]:
            epochs = epochs + [(current_epoch, log_end)]
        if requested < 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == epochs[-1][0]:
            return requested, log_end
        later = next((start for epoch, start in epochs if epoch > requested), None)
        if later is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor = [epoch for epoch, _start in epochs if epoch <= requested]
        return (floor[-1] if floor else requested), later


def read(path: str) -> LeaderEpochCache:
    """The cache a checkpoint file holds; empty when there is none.  Raises
    ``checkpoints.CheckpointError`` for a malformed file."""
    rows = checkpoints.read_rows(path, 2)
    try:
        return LeaderEpochCache((int(epoch), int(start)) for epoch, start in rows)
    except ValueError as exc:
        raise checkpoints.CheckpointError(f"{path}: {exc}") from None


def write(path: str, cache: LeaderEpochCache) -> None:
    checkpoints.write_rows(path, cache.entries)
