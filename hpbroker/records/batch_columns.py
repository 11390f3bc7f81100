"""The records of scanned v2 batches, decoded into columns.

``decode_scanned`` takes batches a ``scan_batches`` found in a buffer and
decodes their records with the record-decode kernel: uncompressed batches
straight from that buffer, compressed ones from one buffer of their
decompressed bodies.  So there are at most two groups, each in the scan's
order; a reader wanting offset order across both merges them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hpbroker.kernels import DecodedRecords, decode_records, layout
from hpbroker.records.compression import decompress
from hpbroker.records.errors import CorruptRecordError


class ScannedRecords(NamedTuple):
    buf: np.ndarray  # where the record bytes are: the scanned view, or decompressed bodies
    batches: np.ndarray  # indexes into the scan, in order
    body_start: np.ndarray  # per batch: where its records start in buf
    columns: DecodedRecords


def data_batches(scan) -> np.ndarray:
    """The v2 batches that hold records (not transaction markers)."""
    return np.flatnonzero((scan.magic == 2) & ((scan.attributes & layout.CONTROL_BIT) == 0))


def decode_scanned(view: np.ndarray, scan, which: np.ndarray) -> list[ScannedRecords]:
    """The records of v2 batches ``which`` of ``scan`` (taken over ``view``).
    A batch whose records do not parse raises CorruptRecordError naming its
    base offset."""
    attrs = scan.attributes[which]
    codec = attrs & layout.COMPRESSION_MASK
    lat = np.where(attrs & layout.TIMESTAMP_TYPE_BIT, scan.max_timestamp[which], -1)
    out = []
    for plain in (True, False):
        sel = (codec == 0) if plain else (codec != 0)
        idx = which[sel]
        if not len(idx):
            continue
        if plain:
            buf = view
            starts = scan.position[idx] + layout.BATCH_HEADER_SIZE
            ends = scan.position[idx] + scan.size[idx]
        else:
            bodies = [decompress(int(c), view[p + layout.BATCH_HEADER_SIZE : p + n])
                      for c, p, n in zip(codec[sel].tolist(), scan.position[idx].tolist(), scan.size[idx].tolist())]
            lengths = np.fromiter((len(b) for b in bodies), np.int64, len(bodies))
            ends = np.cumsum(lengths)
            starts = ends - lengths
            buf = np.frombuffer(b"".join(bodies), np.uint8) if bodies else np.zeros(0, np.uint8)
        cols = decode_records(buf, starts, ends, scan.base_offset[idx], scan.base_timestamp[idx],
                              scan.record_count[idx], lat[sel])
        if cols.error_batch >= 0:
            bad = int(idx[cols.error_batch])
            raise CorruptRecordError(f"batch at offset {int(scan.base_offset[bad])} has malformed records")
        out.append(ScannedRecords(buf, idx, starts, cols))
    return out
