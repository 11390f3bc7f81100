"""Kafka's ``.txnindex``: the aborted transactions whose ABORT marker is in a segment.

Layout (Kafka's AbortedTxn), 34-byte entries back to back, big-endian, no
header::

    0  version           int16   0
    2  producerId        int64
    10 firstOffset       int64   first offset of the transaction
    18 lastOffset        int64   offset of its ABORT marker
    26 lastStableOffset  int64   the LSO when the marker was written

A torn last entry is ignored.  Kafka, and the broker
(``storage/txn_index.py``), create the file only for segments that have an
aborted transaction.

With ``read_committed``, a transactional data batch of producer ``P`` whose
base offset lies in ``[firstOffset, lastOffset]`` of an aborted transaction of
``P`` is dropped whole (a transaction's batches are never split across it).
"""

import os

import numpy as np

from hpbroker.kernels import layout
from hpbroker.storage import filenames, txn_index

ENTRY = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                  ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
assert ENTRY.itemsize == txn_index.ENTRY.size  # the broker's writer: one layout


def read_aborted(partition_path: str, bases: list[int]) -> np.ndarray:
    """``(n, 3)`` int64 rows ``producerId, firstOffset, lastOffset`` from every segment's txnindex."""
    rows = []
    for base in bases:
        path = filenames.segment_file(partition_path, base, filenames.TXN_INDEX_SUFFIX)
        if not os.path.exists(path):
            continue
        raw = np.fromfile(path, np.uint8)
        entries = raw[: len(raw) // ENTRY.itemsize * ENTRY.itemsize].view(ENTRY)
        rows.append(np.stack([entries["producer_id"], entries["first_offset"], entries["last_offset"]], axis=1))
    if not rows:
        return np.zeros((0, 3), np.int64)
    return np.concatenate(rows).astype(np.int64)


def overlapping(aborted: np.ndarray, start: int, end: int) -> np.ndarray:
    """The aborted transactions that can touch offsets ``[start, end)``."""
    keep = (aborted[:, 2] >= start) & (aborted[:, 1] < end)
    return aborted[keep]


def aborted_batches(aborted: np.ndarray, producer_id: np.ndarray, base_offset: np.ndarray,
                    attributes: np.ndarray) -> np.ndarray:
    """Boolean mask of the batches an aborted transaction covers.

    One vectorised pass per aborted transaction (there are few per range),
    not per batch.
    """
    mask = np.zeros(len(base_offset), bool)
    transactional = (attributes & layout.TRANSACTIONAL_BIT) != 0
    for pid, first, last in aborted:
        mask |= (producer_id == pid) & (base_offset >= first) & (base_offset <= last)
    return mask & transactional
