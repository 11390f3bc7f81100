"""Planning on the driver: which offsets each partition can give, and the input partitions.

A partition's readable range is ``[earliest, latest)``:

* earliest: the first segment's base, raised to the broker's
  ``log-start-offset-checkpoint`` (records below it were deleted logically);
* latest: the offset after the last complete, CRC-valid batch of the active
  segment (a torn or half-written tail is never read), lowered to the high
  watermark (``replication-offset-checkpoint``, or the recovery point where
  there is none) when the broker wrote it, so a read racing a live broker sees
  what its consumers may see; with ``read_committed`` lowered again to the last
  stable offset: the first offset of a transaction still open.

The open transactions are found in the active segment's batch headers: a
producer whose transactional data batches are not followed by a marker.  When
such a producer has no marker in the segment at all, the segments before it
are scanned back until its transaction's start shows.

Each planned range becomes one ``Slice`` per segment it touches, and a large
segment is cut at ``.index`` entries into slices of about
``maxBytesPerPartition`` bytes, each with the byte position to start at.
"""

from dataclasses import dataclass, field

import numpy as np
from pyspark.sql.datasource import InputPartition

from hpbroker.kernels import layout, scan_batches
from hpbroker.records import decode_batch
from hpbroker.sentinels import EARLIEST, LATEST
from hpbroker.spark import logdir, txnindex
from hpbroker.spark.options import Options
from hpbroker.spark.segment import SegmentFile, index_lookup, read_index


@dataclass
class Slice(InputPartition):
    """One input partition: offsets ``[start, end)`` of one segment."""

    path: str
    topic: str
    partition: int
    base: int
    start: int
    end: int
    hint: int = 0
    aborted: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    fail_on_data_loss: bool = True


@dataclass
class PartitionInfo:
    pdir: logdir.PartitionDir
    bases: list
    earliest: int
    latest: int | None = None  # filled by readable_end

    @property
    def key(self):
        return self.pdir.key


def partitions_of(opts: Options, ckpts: dict) -> list[logdir.PartitionDir]:
    """The selected partitions, each from one log dir (see ``logdir.choose_replicas``)."""
    if opts.assign is not None:
        wanted = {(t, p) for t, ps in opts.assign.items() for p in ps}
        found = [p for p in logdir.find_partitions(list(opts.log_dirs), topics=list(opts.assign)) if p.key in wanted]
        missing = wanted - {p.key for p in found}
        if missing:
            raise FileNotFoundError(f"hpbroker source: no directory for assigned partitions {sorted(missing)}")
    else:
        found = logdir.find_partitions(list(opts.log_dirs), list(opts.topics) if opts.topics else None, opts.pattern)
    return logdir.choose_replicas(found, ckpts)


def describe(opts: Options, *, with_latest: bool = True) -> dict:
    """``{(topic, partition): PartitionInfo}`` of every partition the options select."""
    ckpts = {d: logdir.Checkpoints.read(d) if opts.use_checkpoints else None for d in opts.log_dirs}
    out = {}
    for pdir in partitions_of(opts, ckpts):
        bases = logdir.segment_bases(pdir.path)
        ck = ckpts[pdir.log_dir]
        earliest = bases[0] if bases else 0
        if ck is not None and pdir.key in ck.log_start:
            earliest = max(earliest, ck.log_start[pdir.key])
        info = PartitionInfo(pdir, bases, earliest)
        if with_latest:
            info.latest = readable_end(info, ck, opts.read_committed)
            info.earliest = min(info.earliest, info.latest)
        out[pdir.key] = info
    return out


def readable_end(info: PartitionInfo, ck, read_committed: bool) -> int:
    if not info.bases:
        return info.earliest
    active = info.bases[-1]
    with SegmentFile(info.pdir.path, active) as seg:
        scan = scan_batches(seg.view, 0, verify_crc=True)
    end = int(scan.last_offset[-1]) + 1 if len(scan.last_offset) else active
    if ck is not None:
        limit = ck.read_limit(info.key)
        if limit is not None:
            end = min(end, limit)
    if read_committed:
        end = min(end, _last_stable_offset(info, scan, end))
    return end


def _last_stable_offset(info: PartitionInfo, active_scan, limit: int) -> int:
    open_first = {}
    unresolved = None
    scan, index = active_scan, len(info.bases) - 1
    while True:
        attributes = scan.attributes
        txn = ((attributes & layout.TRANSACTIONAL_BIT) != 0) & (scan.base_offset < limit)
        control = (attributes & layout.CONTROL_BIT) != 0
        present = set(np.unique(scan.producer_id[txn]).tolist())
        pids = present if unresolved is None else unresolved & present
        still = set()
        for pid in pids:
            mine = txn & (scan.producer_id == pid)
            markers = np.flatnonzero(mine & control)
            data = np.flatnonzero(mine & ~control)
            after = data[data > markers[-1]] if len(markers) else data
            if len(after):
                open_first[pid] = int(scan.base_offset[after[0]])
            if not len(markers) and len(after):
                still.add(pid)  # its transaction may have begun in an earlier segment
        unresolved = still
        if not unresolved or index == 0:
            break
        index -= 1
        with SegmentFile(info.pdir.path, info.bases[index]) as seg:
            scan = scan_batches(seg.view, 0, verify_crc=False)
    return min(open_first.values(), default=limit)


def offset_for_timestamp(info: PartitionInfo, timestamp: int) -> int:
    """First offset in ``[earliest, latest)`` whose record timestamp is >= ``timestamp`` (latest if none)."""
    latest = info.latest
    assert latest is not None, "readable_end fills it"
    for base in info.bases:
        if base >= latest:
            break
        with SegmentFile(info.pdir.path, base) as seg:
            scan = scan_batches(seg.view, 0, verify_crc=False)
            hits = np.flatnonzero((scan.max_timestamp >= timestamp) & (scan.last_offset >= info.earliest)
                                  & (scan.base_offset < latest) & (scan.magic == 2)
                                  & ((scan.attributes & layout.CONTROL_BIT) == 0))
            if not len(hits):
                continue
            batch = decode_batch(seg.view, int(scan.position[hits[0]]))
            for record in batch.records:
                if record.timestamp >= timestamp and info.earliest <= record.offset < latest:
                    return record.offset
            return int(scan.last_offset[hits[0]]) + 1
    return latest


def resolve(spec, info: PartitionInfo, default: str) -> int:
    """An offset from a startingOffsets/endingOffsets value for one partition."""
    value = spec if isinstance(spec, str) else spec.get(info.key, EARLIEST if default == "earliest" else LATEST)
    if value in ("earliest", EARLIEST):
        return info.earliest
    if value in ("latest", LATEST):
        assert info.latest is not None, "readable_end fills it"
        return info.latest
    return int(value)


def slices(info: PartitionInfo, start: int, end: int, opts: Options, aborted=None) -> list[Slice]:
    """The input partitions reading ``[start, end)`` of one partition."""
    if start < info.earliest:
        if opts.fail_on_data_loss:
            raise ValueError(
                f"{info.pdir.topic}-{info.pdir.partition}: offsets from {start} were requested but the log starts "
                f"at {info.earliest} (deleted by retention?); set failOnDataLoss=false to skip them")
        start = info.earliest
    if start >= end:
        return []
    if aborted is None:
        aborted = (txnindex.read_aborted(info.pdir.path, info.bases) if opts.read_committed
                   else np.zeros((0, 3), np.int64))
    out = []
    bounds = info.bases[1:] + [end]
    for base, seg_end in zip(info.bases, bounds):
        lo, hi = max(start, base), min(end, seg_end)
        if lo >= hi:
            continue
        offsets, positions = read_index(info.pdir.path, base)
        hint = index_lookup(offsets, positions, lo)
        cuts = _cuts(offsets, positions, lo, hi, hint, opts.max_bytes_per_partition)
        starts = [(lo, hint)] + cuts
        ends = [c for c, _ in cuts] + [hi]
        for (s, h), e in zip(starts, ends):
            out.append(Slice(info.pdir.path, info.pdir.topic, info.pdir.partition, base, s, e, h,
                             txnindex.overlapping(aborted, s, e), opts.fail_on_data_loss))
    return out


def _cuts(offsets, positions, lo, hi, hint, max_bytes) -> list[tuple[int, int]]:
    """(offset, position) index entries where a new slice starts, about ``max_bytes`` apart."""
    inside = (offsets > lo) & (offsets < hi)
    o, p = offsets[inside], positions[inside]
    if not len(o):
        return []
    bucket = p // max_bytes
    first = np.r_[True, np.diff(bucket) > 0] & (bucket > hint // max_bytes)
    return list(zip(o[first].tolist(), p[first].tolist()))
