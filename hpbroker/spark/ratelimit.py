"""maxRecordsPerTrigger / maxBytesPerTrigger: how far one micro-batch may go.

The budget is shared between partitions in proportion to their backlog in
offsets (as Spark's Kafka source shares maxOffsetsPerTrigger), so one busy
partition cannot starve the others.  Records are counted as offsets (a
compacted or transactional log has fewer records than offsets, so a batch can
be smaller than the cap, never larger).  Bytes are counted in whole batches
of the segment files; every partition with a backlog advances by at least one
batch, or a budget smaller than a batch would stall the stream.
"""

import numpy as np

from hpbroker.kernels import scan_batches
from hpbroker.spark.segment import SegmentFile, index_lookup, read_index


def _shares(begin: dict, latest: dict, budget: int) -> dict:
    backlog = {k: max(0, latest[k] - begin.get(k, latest[k])) for k in latest}
    total = sum(backlog.values())
    if total <= budget:
        return backlog
    shares = {k: budget * b // total for k, b in backlog.items()}
    if not any(shares.values()):  # a budget below the partition count: give it to the largest backlog
        biggest = max(backlog, key=backlog.__getitem__)
        shares[biggest] = min(budget, backlog[biggest])
    return shares


def by_records(begin: dict, latest: dict, max_records: int) -> dict:
    shares = _shares(begin, latest, max_records)
    return {k: begin.get(k, latest[k]) + shares[k] for k in latest}


def by_bytes(infos: dict, begin: dict, latest: dict, max_bytes: int) -> dict:
    backlog = {k: max(0, latest[k] - begin.get(k, latest[k])) for k in latest}
    total = sum(backlog.values())
    out = dict(latest)
    for key, b in backlog.items():
        if b and key in infos:
            budget = max(1, max_bytes * b // total)
            out[key] = offset_after_bytes(infos[key], begin[key], latest[key], budget)
    return out


def offset_after_bytes(info, start: int, end: int, budget: int) -> int:
    """The offset after the batches from ``start`` that fit ``budget`` bytes (at least one batch)."""
    taken = 0
    for base, seg_end in zip(info.bases, info.bases[1:] + [end]):
        if seg_end <= start or base >= end:
            continue
        offsets, positions = read_index(info.pdir.path, base)
        with SegmentFile(info.pdir.path, base) as seg:
            pos = seg.start_position(start, index_lookup(offsets, positions, start))
            scan = scan_batches(seg.view, pos, verify_crc=False)
        wanted = (scan.last_offset >= start) & (scan.base_offset < end)
        sizes = scan.size[wanted]
        lasts = scan.last_offset[wanted]
        cumulative = taken + np.cumsum(sizes)
        fits = int(np.searchsorted(cumulative, budget, side="right"))
        if fits < len(sizes):
            if fits == 0 and taken == 0:
                fits = 1
            return min(end, int(lasts[fits - 1]) + 1) if fits else start
        taken = int(cumulative[-1]) if len(cumulative) else taken
        start = max(start, seg_end)
    return end
