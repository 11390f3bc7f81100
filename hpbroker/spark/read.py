"""Executor side: one ``Slice`` -> ``pyarrow.RecordBatch`` es, straight from the segment file.

The slice's segment is mapped read-only and walked in chunks of about
``CHUNK_BYTES``: each chunk is one call of the batch-scan kernel with CRC
checking, then ``to_arrow.chunk_to_arrow`` for the batches that overlap
``[start, end)``.  The walk ends at the first batch at or past ``end``; the
planner chose ``end`` at or below the last valid batch, so a torn or corrupt
batch before it means the log changed or rotted after planning: an error, or
the end of this slice with ``failOnDataLoss=false``.
"""

from typing import Iterator

import numpy as np
import pyarrow as pa

from hpbroker.kernels import scan_batches
from hpbroker.kernels.batch_scan import STOP_END, STOP_LIMIT
from hpbroker.spark import txnindex
from hpbroker.spark.plan import Slice
from hpbroker.spark.segment import SegmentFile
from hpbroker.spark.to_arrow import chunk_to_arrow, select

CHUNK_BYTES = 8 << 20
# Also cap a chunk's records: well-compressed batches would otherwise make
# one Arrow batch of the whole slice (memory, and cold pages for every buffer).
CHUNK_RECORDS = 1 << 16


class DataLossError(RuntimeError):
    pass


def _head(scan, n: int):
    """The first ``n`` batches of a scan, ending where the next one starts."""
    return scan._replace(**{f: getattr(scan, f)[:n] for f in scan._fields if f not in ("stop", "valid_end")},
                         stop=STOP_LIMIT, valid_end=int(scan.position[n]))


def read_slice(s: Slice, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    with SegmentFile(s.path, s.base) as seg:
        view = seg.view
        size = view.shape[0]
        pos = seg.start_position(s.start, s.hint)
        reached = s.start
        stop = STOP_END
        while pos < size and reached < s.end:
            scan = scan_batches(view, pos, min(pos + chunk_bytes, size), verify_crc=True)
            if not len(scan.position) and scan.stop == STOP_LIMIT:  # one batch larger than a chunk
                scan = scan_batches(view, pos, verify_crc=True, max_batches=1)
            stop = scan.stop
            if not len(scan.position):
                break
            cut = int(np.searchsorted(np.cumsum(scan.record_count), CHUNK_RECORDS, side="right")) + 1
            if cut < len(scan.position):
                scan = _head(scan, cut)
                stop = STOP_LIMIT
            wanted = (scan.last_offset >= s.start) & (scan.base_offset < s.end)
            if len(s.aborted):
                wanted &= ~txnindex.aborted_batches(s.aborted, scan.producer_id, scan.base_offset, scan.attributes)
            if wanted.any():
                yield from chunk_to_arrow(view, select(scan, wanted), s.start, s.end, s.topic, s.partition)
            reached = int(scan.last_offset[-1]) + 1
            pos = scan.valid_end
            if stop not in (STOP_END, STOP_LIMIT):
                break
        if reached < s.end and stop not in (STOP_END, STOP_LIMIT) and s.fail_on_data_loss:
            raise DataLossError(
                f"{s.topic}-{s.partition}: segment {seg.path} ends in an invalid batch at byte {pos} (offset "
                f"{reached}) but offsets up to {s.end} were planned; set failOnDataLoss=false to read around it")
        del view
