"""The records of stored batches, decoded into columns.

Appending to a compacted topic and compacting one look into records (keys,
values, offsets), not just batch headers.  ``decode`` turns the batches of a
``scan_batches`` result into ``DecodedRecords`` columns (by
``records.batch_columns``) with what compaction asks of them: key hashes and
each record's byte span.
"""

from dataclasses import dataclass

import numpy as np

from hpbroker.kernels import DecodedRecords
from hpbroker.kernels.key_table import hash_keys
from hpbroker.records.batch_columns import decode_scanned
from hpbroker.records.errors import CorruptRecordError
from hpbroker.storage.errors import CorruptBatchError


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


def decode(view: np.ndarray, scan, which: np.ndarray) -> list[BatchRecords]:
    """The records of batches ``which`` of ``scan`` (taken over ``view``): one
    ``BatchRecords`` for the uncompressed batches, one for the compressed."""
    try:
        groups = decode_scanned(view, scan, which)
    except CorruptRecordError as exc:
        raise CorruptBatchError(str(exc)) from None
    return [BatchRecords(g.buf, g.batches, g.body_start, g.columns,
                         np.repeat(g.batches, np.diff(g.columns.batch_first)))
            for g in groups]
