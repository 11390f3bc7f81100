"""The records of stored batches, decoded into columns.

Appending to a compacted topic and compacting one look into records (keys,
values, offsets), not just batch headers.  ``decode`` turns the batches of a
``scan_batches`` result into ``DecodedRecords`` columns: uncompressed batches
straight from the buffer they were scanned in, compressed ones from one
buffer of their decompressed bodies.
"""

from dataclasses import dataclass

import numpy as np

from hpbroker.kernels import DecodedRecords, decode_records, layout
from hpbroker.records.compression import decompress
from hpbroker.storage.errors import CorruptBatchError
from hpbroker.storage.offset_map import hash_keys


@dataclass
class BatchRecords:
    """The records of some batches of one buffer, decoded."""

    buf: np.ndarray  # where the record bytes are: the scanned view, or decompressed bodies
    batches: np.ndarray  # indexes into the scan, in order
    body_start: np.ndarray  # per batch: where its records start in buf
    columns: DecodedRecords
    batch_of_row: np.ndarray  # per record: index into the scan

    def key_hashes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Both 64-bit hashes of every record's key, and which records have one."""
        c = self.columns
        h1, h2 = hash_keys(self.buf, c.key_start, c.key_length)
        return h1, h2, c.key_length >= 0

    def spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Byte range of every record (length prefix included) in ``buf``: each
        ends after its value (plus the 1-byte zero header count) or its last
        header, and starts where the previous one ended."""
        c = self.columns
        end = c.value_start + np.maximum(c.value_length, 0) + 1
        with_headers = np.flatnonzero(c.header_count > 0)
        if len(with_headers):
            last = c.header_first[with_headers] + c.header_count[with_headers] - 1
            end[with_headers] = c.header_value_start[last] + np.maximum(c.header_value_length[last], 0)
        start = np.empty_like(end)
        start[1:] = end[:-1]
        firsts = c.batch_first[:-1]
        nonempty = firsts < c.batch_first[1:]
        start[firsts[nonempty]] = self.body_start[nonempty]
        return start, end


def data_batches(scan) -> np.ndarray:
    """The v2 data batches: the only ones whose records compaction looks at."""
    return np.flatnonzero((scan.magic == 2) & ((scan.attributes & layout.CONTROL_BIT) == 0))


def decode(view: np.ndarray, scan, which: np.ndarray) -> list[BatchRecords]:
    """The records of batches ``which`` of ``scan`` (taken over ``view``): one
    ``BatchRecords`` for the uncompressed batches, one for the compressed."""
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
            raise CorruptBatchError(f"batch at offset {int(scan.base_offset[bad])} has malformed records")
        counts = np.diff(cols.batch_first)
        out.append(BatchRecords(buf, idx, starts, cols, np.repeat(idx, counts)))
    return out
