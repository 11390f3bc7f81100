"""Batch scan: find, check and describe every log entry in a byte range, in one call.

A segment is nothing but entries back to back, each framed by its own length
(see ``layout``).  ``scan_batches`` walks ``[start, end)`` of a uint8 view and
returns one row per complete entry as parallel arrays (a struct of arrays, all
views of one int64 block), and why and where it stopped:

* ``STOP_END``        reached ``end`` exactly;
* ``STOP_LIMIT``      ``max_batches`` reached, or the next entry runs past
                      ``end`` but not past the view (a byte-limited read);
* ``STOP_TORN``       the next entry runs past the end of the view: an
                      incomplete write, or garbage whose length points nowhere;
* ``STOP_BAD_LENGTH`` a length smaller than the smallest entry of its magic;
* ``STOP_BAD_MAGIC``  a magic byte other than 0, 1, 2;
* ``STOP_BAD_CRC``    a CRC mismatch (only with ``verify_crc``).

``valid_end`` is the byte where the scan stopped: the end of the valid prefix
when ``stop_at_invalid`` (the default).  With ``stop_at_invalid=False`` an entry
whose CRC fails is returned with ``crc_ok == 0`` and the scan goes on, which is
what a dump tool wants; structural failures always stop it.  Without
``verify_crc`` every ``crc_ok`` is 1 (unchecked).

Magic 2 entries are record batches; magic 0/1 entries are legacy messages
(base and last offset are the message's offset, ``record_count`` is 1 and
``max_timestamp`` the v1 timestamp or -1; producer fields are -1).

The kernels are compiled for one signature each (see ``jit``); the wrapper
hands them a contiguous uint8 view, int64 bounds and bool flags.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, types

from hpbroker.kernels import layout
from hpbroker.kernels.crc import crc32_ieee, crc32c_update
from hpbroker.kernels.jit import BYTES, kernel

STOP_END = 0
STOP_LIMIT = 1
STOP_TORN = 2
STOP_BAD_LENGTH = 3
STOP_BAD_MAGIC = 4
STOP_BAD_CRC = 5

# Rows of the result block, in order.
COLUMNS = (
    "position", "size", "base_offset", "last_offset", "max_timestamp", "base_timestamp", "record_count",
    "attributes", "magic", "crc_ok", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
)
_N_COLUMNS = len(COLUMNS)
(_POS, _SIZE, _BASE, _LAST, _MAX_TS, _BASE_TS, _COUNT, _ATTR, _MAGIC, _CRC_OK, _EPOCH, _PID, _PEPOCH,
 _SEQ) = range(_N_COLUMNS)

# Smallest batchLength (bytes after the length field) per magic.
_MIN_LENGTH_V2 = layout.BATCH_HEADER_SIZE - layout.LOG_OVERHEAD
_MIN_LENGTH_V0 = layout.LEGACY_V0_MIN_SIZE - layout.LOG_OVERHEAD
_MIN_LENGTH_V1 = layout.LEGACY_V1_MIN_SIZE - layout.LOG_OVERHEAD


class BatchScan(NamedTuple):
    position: np.ndarray
    size: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    max_timestamp: np.ndarray
    base_timestamp: np.ndarray
    record_count: np.ndarray
    attributes: np.ndarray
    magic: np.ndarray
    crc_ok: np.ndarray
    partition_leader_epoch: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_sequence: np.ndarray
    stop: int
    valid_end: int


@njit(cache=True, nogil=True, inline="always")
def _be(buf, pos, width):
    """Big-endian signed integer of ``width`` bytes at ``pos``."""
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(buf[pos + i])
    shift = 64 - 8 * width
    return (v << shift) >> shift


@njit(cache=True, nogil=True, inline="always")
def _frame(buf, pos, end, view_end):
    """(size, magic, stop) of the entry at ``pos``; stop is -1 when it is whole."""
    if pos + layout.MAGIC_PROBE_SIZE > end:
        return 0, 0, STOP_TORN if pos + layout.MAGIC_PROBE_SIZE > view_end else STOP_LIMIT
    length = _be(buf, pos + layout.BATCH_LENGTH, 4)
    magic = np.int64(buf[pos + layout.MAGIC])
    if magic == 2:
        min_length = _MIN_LENGTH_V2
    elif magic == 1:
        min_length = _MIN_LENGTH_V1
    elif magic == 0:
        min_length = _MIN_LENGTH_V0
    else:
        return 0, magic, STOP_BAD_MAGIC
    if length < min_length:
        return 0, magic, STOP_BAD_LENGTH
    size = length + layout.LOG_OVERHEAD
    if pos + size > end:
        return size, magic, STOP_TORN if pos + size > view_end else STOP_LIMIT
    return size, magic, -1


_NO_LIMIT = int(np.iinfo(np.int64).max)


@kernel((BYTES, types.int64, types.int64, types.int64))
def _count(buf, start, end, max_batches):
    """Entries whose framing is whole, hopping from length to length: sizes the
    output exactly, since growing it would cost more than this pass."""
    view_end = buf.shape[0]
    n = 0
    pos = start
    while pos < end and n < max_batches:
        size, magic, stop = _frame(buf, pos, end, view_end)
        if stop >= 0:
            break
        n += 1
        pos += size
    return n


@kernel((BYTES, types.int64, types.int64, types.boolean, types.int64, types.boolean))
def _scan(buf, start, end, verify_crc, max_batches, stop_at_invalid):
    view_end = buf.shape[0]
    rows = np.empty((_N_COLUMNS, _count(buf, start, end, max_batches)), np.int64)
    n = 0
    pos = start
    stop = STOP_END
    while pos < end:
        if n == max_batches:
            stop = STOP_LIMIT
            break
        size, magic, frame_stop = _frame(buf, pos, end, view_end)
        if frame_stop >= 0:
            stop = frame_stop
            break
        crc_ok = 1
        if verify_crc:
            if magic == 2:
                stored = _be(buf, pos + layout.CRC, 4) & 0xFFFFFFFF
                crc_ok = 1 if crc32c_update(buf, pos + layout.CRC_START, pos + size, 0) == stored else 0
            else:
                stored = _be(buf, pos + layout.LEGACY_CRC, 4) & 0xFFFFFFFF
                crc_ok = 1 if crc32_ieee(buf, pos + layout.LEGACY_CRC_START, pos + size, 0) == stored else 0
            if crc_ok == 0 and stop_at_invalid:
                stop = STOP_BAD_CRC
                break
        rows[_POS, n] = pos
        rows[_SIZE, n] = size
        rows[_MAGIC, n] = magic
        rows[_CRC_OK, n] = crc_ok
        base = _be(buf, pos, 8)
        rows[_BASE, n] = base
        if magic == 2:
            rows[_LAST, n] = base + _be(buf, pos + layout.LAST_OFFSET_DELTA, 4)
            rows[_MAX_TS, n] = _be(buf, pos + layout.MAX_TIMESTAMP, 8)
            rows[_BASE_TS, n] = _be(buf, pos + layout.BASE_TIMESTAMP, 8)
            rows[_COUNT, n] = _be(buf, pos + layout.RECORD_COUNT, 4)
            rows[_ATTR, n] = _be(buf, pos + layout.ATTRIBUTES, 2)
            rows[_EPOCH, n] = _be(buf, pos + layout.PARTITION_LEADER_EPOCH, 4)
            rows[_PID, n] = _be(buf, pos + layout.PRODUCER_ID, 8)
            rows[_PEPOCH, n] = _be(buf, pos + layout.PRODUCER_EPOCH, 2)
            rows[_SEQ, n] = _be(buf, pos + layout.BASE_SEQUENCE, 4)
        else:
            timestamp = _be(buf, pos + layout.LEGACY_TIMESTAMP, 8) if magic == 1 else -1
            rows[_LAST, n] = base
            rows[_MAX_TS, n] = timestamp
            rows[_BASE_TS, n] = timestamp
            rows[_COUNT, n] = 1
            rows[_ATTR, n] = np.int64(buf[pos + layout.LEGACY_ATTRIBUTES])
            rows[_EPOCH, n] = -1
            rows[_PID, n] = -1
            rows[_PEPOCH, n] = -1
            rows[_SEQ, n] = -1
        n += 1
        pos += size
    return rows[:, :n], stop, pos


def scan_batches(
    view: np.ndarray,
    start: int = 0,
    end: int | None = None,
    *,
    verify_crc: bool = True,
    max_batches: int | None = None,
    stop_at_invalid: bool = True,
) -> BatchScan:
    """Scan the entries of ``view[start:end]`` (see the module docstring)."""
    if not isinstance(view, np.ndarray) or view.dtype != np.uint8 or view.ndim != 1:
        raise TypeError("view must be a one-dimensional uint8 array")
    if not view.flags.c_contiguous:
        view = np.ascontiguousarray(view)
    size: int = view.shape[0]
    end = size if end is None else min(int(end), size)
    start = int(start)
    if not 0 <= start <= max(end, 0):
        raise ValueError(f"start {start} outside [0, {end}]")
    limit = _NO_LIMIT if max_batches is None else int(max_batches)
    rows, stop, valid_end = _scan(view, start, end, bool(verify_crc), limit, bool(stop_at_invalid))
    return BatchScan(*rows, stop=int(stop), valid_end=int(valid_end))
