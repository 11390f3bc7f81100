"""From a partition directory to a ready log: Kafka's ``LogLoader``.

Recovery is an ordinary path: every open runs the same steps, and an unclean
stop only gives more of them work to do.

1. Tidy (``tidy_directory``): finish or undo what a crash interrupted.
   ``.deleted``, ``.cleaned`` and ``.tmp`` files go; an index ``.swap`` goes
   (the index is rebuilt); a ``.log.swap`` completes the cleaner's swap (the
   segments it replaced go, then it takes its plain name); index files
   without a ``.log`` go.
2. Segments: one per ``.log`` file, or one at the log start offset in an
   empty directory.  A segment wholly below the recovery point (every one
   after a clean shutdown) is adopted from its indexes (``LogSegment.load``);
   one reaching past it, or whose indexes do not fit its file, is recovered
   (``LogSegment.recover``: CRC and offsets of every batch checked, the file
   cut after the last valid batch, both indexes rebuilt).  Bytes after a cut
   were never durable, so every later segment goes as well.  What recovery
   kept is fsynced and becomes the recovery point.
3. Offsets: the log end is the last segment's next offset; the log start is
   the checkpointed one, at least the first segment's base, at most the log
   end; the recovery point lies between them.
4. Leader epochs (``leader_epochs.py``): an unreadable checkpoint is logged
   and read as empty; epochs starting at or past the log end are dropped.
5. Producer state (``producer_state.py``): the newest snapshot in [log start,
   log end] is loaded (those outside go), the batches after it are replayed
   and a snapshot is taken at the log end, so the next open replays nothing.
   A truncation and a failed write rebuild the state the same way
   (``replay_producer_state``).
"""

import logging
import mmap
import os
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from hpbroker.clock import now_ms
from hpbroker.kernels import scan_batches
from hpbroker.records import CorruptRecordError, control
from hpbroker.storage import checkpoints, filenames, leader_epochs
from hpbroker.storage.errors import KafkaStorageError
from hpbroker.storage.index_file import IndexCorruptError
from hpbroker.storage.leader_epochs import LeaderEpochCache
from hpbroker.storage.producer_state import ProducerStateManager
from hpbroker.storage.segment import LogSegment
from hpbroker.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedLog:
    segments: tuple[LogSegment, ...]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int  # everything below it is fsynced
    leader_epochs: LeaderEpochCache


def load(
    directory: str,
    name: str,
    new_segment: Callable[[int, int], LogSegment],
    producer_state: ProducerStateManager,
    *,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
) -> LoadedLog:
    """Open the segments of ``directory`` and recover what needs it (steps 1-5
    above).  ``new_segment(base_offset, created_ms)`` opens one segment;
    ``producer_state`` is filled in place; ``name`` labels the log lines."""
    segments, recovered = _open_segments(directory, name, new_segment, recovery_point, log_start_offset, clean_shutdown)
    end = segments[-1].next_offset
    start = min(max(log_start_offset, segments[0].base_offset), end)
    if recovered:
        for segment in recovered:
            try:
                segment.flush()
            except OSError as exc:
                raise KafkaStorageError(f"{name}: fsync after recovery failed: {exc}") from exc
        recovery_point = end
    else:
        recovery_point = min(max(recovery_point, start), end)
    epochs = _load_leader_epochs(directory, name, end)
    _load_producer_state(producer_state, name, segments, start, end)
    return LoadedLog(segments, start, end, recovery_point, epochs)


def _open_segments(directory, name, new_segment, recovery_point, log_start_offset, clean_shutdown):
    """The segments, cut after the first torn or corrupt batch, and those of
    them that were recovered rather than adopted."""
    bases = tidy_directory(directory)
    created = now_ms()
    segments = [new_segment(base, created) for base in bases] or [new_segment(log_start_offset, created)]
    recovered = []
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        unflushed = not clean_shutdown and (next_base is None or next_base > recovery_point)
        if not unflushed:
            try:
                segment.load()
                continue
            except IndexCorruptError as exc:
                log.warning("%s: rebuilding indexes: %s", name, exc)
        result = segment.recover()
        recovered.append(segment)
        if result.truncated_bytes:
            log.warning(
                "%s: segment %d: cut %d bytes after %d valid batches (%d bytes): %s",
                name, segment.base_offset, result.truncated_bytes, result.batches, result.valid_bytes, result.reason,
            )
            for later in segments[i + 1 :]:
                log.warning("%s: deleting segment %d after the corruption", name, later.base_offset)
                later.close_and_unlink()
            segments = segments[: i + 1]
            break
    return tuple(segments), recovered


def _load_leader_epochs(directory: str, name: str, log_end: int) -> LeaderEpochCache:
    path = os.path.join(directory, filenames.LEADER_EPOCH_CHECKPOINT)
    try:
        epochs = leader_epochs.read(path)
    except checkpoints.CheckpointError as exc:
        log.warning("%s: ignoring %s", name, exc)
        epochs = LeaderEpochCache()
    if epochs.truncate_from_end(log_end):
        leader_epochs.write(path, epochs)
    return epochs


def _load_producer_state(producer_state: ProducerStateManager, name: str, segments, start: int, end: int) -> None:
    # Snapshots above the recovered end (a cut tail) or below the log start
    # are dropped by the reload; the batches after the snapshot are replayed.
    replay_from = producer_state.load_latest_snapshot(end, start, now_ms())
    replay_producer_state(producer_state, segments, replay_from)
    producer_state.set_end_offset(end)
    if replay_from != end:  # after a clean close the snapshot at the end is already there
        take_snapshot(producer_state, name, end)


def replay_producer_state(producer_state: ProducerStateManager, segments: Iterable[LogSegment], start: int) -> None:
    """Feed every written batch ending at or after ``start`` to the producer
    state; the aborts among the transactions it ends go into their segment's
    ``.txnindex`` (rebuilt there after recovery cut it; already there, else)."""
    for segment in segments:
        if segment.next_offset <= start:
            continue
        found = segment.find_batch(start)
        scan = scan_batches(segment.view(), found.position if found else 0, segment.size, verify_crc=False)
        producer_state.load_from_batches(scan, from_offset=start)
        if producer_state.has_completed:
            markers = dict(zip(scan.last_offset.tolist(), scan.position.tolist()))
            for txn in aborts_among(producer_state, segment.view(), markers, segment.log_path):
                segment.txn_index.append(txn)


def aborts_among(producer_state: ProducerStateManager, buf, markers: dict[int, int], name: str) -> list[AbortedTxn]:
    """The transactions the producer state just ended (taken from it) that their
    markers abort (and each producer's coordinator epoch, from its marker);
    ``markers`` maps a marker's offset to its position in ``buf``.
    A marker that cannot be read is already in the log: it is logged, and
    indexes nothing."""
    aborted = []
    for txn in producer_state.take_completed():
        position = markers.get(txn.last_offset)
        if position is None:
            continue
        try:
            marker = control.marker_at(buf, position)
        except CorruptRecordError as exc:
            log.error("%s: a control batch without a readable marker: %s", name, exc)
            continue
        # the coordinator epoch a later marker must not be older than (a succeeded coordinator's
        # is refused): known on every path a marker comes by, a follower's and a replay's too
        entry = producer_state.entry(txn.producer_id)
        if entry is not None:
            entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        if marker.is_abort:
            aborted.append(AbortedTxn(*txn))
    return aborted


def take_snapshot(producer_state: ProducerStateManager, name: str, offset: int, *, sync: bool = True) -> str | None:
    """Write ``<offset>.snapshot``; its path, or None when that failed.  A
    snapshot only saves replay work on the next open: failing to write one (a
    full disk) must not fail the roll or close that asked for it."""
    try:
        return producer_state.take_snapshot(offset, sync=sync)
    except OSError as exc:
        log.warning("%s: no producer snapshot at %s: %s", name, offset, exc)
        return None


def tidy_directory(directory: str) -> list[int]:
    """Finish or undo what a crash interrupted and return the segments' base
    offsets, following Kafka's LogLoader: ``.deleted`` and ``.cleaned`` files
    go; index ``.swap`` files go (rebuilt from the log); a ``.log.swap``
    completes the cleaner's swap: the segments it replaced, those with base
    offsets in [its base, its next offset), go and it takes its plain name,
    with its ``.txnindex.swap`` (the aborts cannot be rebuilt from one
    segment). Index files without a ``.log`` go."""
    swaps, aborts = [], {}
    txn_swap = filenames.TXN_INDEX_SUFFIX + filenames.SWAP_SUFFIX
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith((filenames.DELETED_SUFFIX, filenames.CLEANED_SUFFIX, ".tmp")):
            os.unlink(path)
        elif name.endswith(filenames.SWAP_SUFFIX):
            if filenames.is_segment_log(name[: -len(filenames.SWAP_SUFFIX)]):
                swaps.append(path)
            elif name.endswith(txn_swap):  # cannot be rebuilt from its log alone: goes with it
                aborts[filenames.base_offset_of(name)] = path
            else:
                os.unlink(path)
    for path in sorted(swaps):
        base = filenames.base_offset_of(path)
        end = _next_offset_of_file(path, base)
        for name in os.listdir(directory):
            if name.endswith(filenames.SWAP_SUFFIX) or not name.endswith(filenames.SEGMENT_SUFFIXES):
                continue
            try:
                replaced = base <= filenames.base_offset_of(name) < end
            except ValueError:
                continue
            if replaced:
                os.unlink(os.path.join(directory, name))
        txn = aborts.pop(base, None)
        if txn is not None:
            os.replace(txn, txn[: -len(filenames.SWAP_SUFFIX)])
        os.replace(path, path[: -len(filenames.SWAP_SUFFIX)])
    for txn in aborts.values():  # its log never became a swap: the cleaning was abandoned
        os.unlink(txn)
    if swaps:
        checkpoints.fsync_dir(directory)
    names = os.listdir(directory)
    bases = sorted(filenames.base_offset_of(n) for n in names if filenames.is_segment_log(n))
    known = set(bases)
    for name in names:
        if name.endswith((filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX, filenames.TXN_INDEX_SUFFIX)):
            try:
                orphan = filenames.base_offset_of(name) not in known
            except ValueError:
                continue
            if orphan:
                os.unlink(os.path.join(directory, name))
    return bases


def _next_offset_of_file(path: str, base: int) -> int:
    """The offset after the last whole batch of a segment file (``base + 1``
    when it holds none, so that at least the segment it is named after goes)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return base + 1
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = np.frombuffer(mapped, np.uint8)
            last = scan_batches(view, verify_crc=False).last_offset
            del view  # the mmap cannot close while a view exports it
    return int(last[-1]) + 1 if len(last) else base + 1
