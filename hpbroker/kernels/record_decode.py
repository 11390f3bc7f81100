"""Record decode: the records of many v2 batches into columns, in one call.

Input is a uint8 buffer holding the (uncompressed, or already decompressed)
record bodies of each batch in ``[starts[i], ends[i])``, and per batch its base
offset, base timestamp, record count and, for LogAppendTime batches, the
timestamp that replaces the records' own (-1 otherwise).  Record layout: see
``hpbroker.records.record``; every integer is a zig-zag varint.

Output (struct of arrays, one row per record; positions index the input
buffer, a length of -1 means null):

* ``offset``, ``timestamp``, ``attributes``
* ``key_start``, ``key_length``, ``value_start``, ``value_length``
* ``header_first``, ``header_count``: the record's rows in the header columns
* header columns ``header_key_start``, ``header_key_length``,
  ``header_value_start``, ``header_value_length``

Decoding stops at the first malformed batch (a varint past the record's end,
a field past the record's end, fewer or more records than declared):
``error_batch`` names it (-1 when all were fine) and only the batches before it
are in the columns, so a reader can report it and still use the good prefix.

The kernels are compiled for one signature each (see ``jit``): the wrapper
hands them the uint8 buffer, contiguous int64 per-batch arrays and the int64
columns it allocates.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, types

from hpbroker.kernels.jit import BYTES, INT64S, INT64S_OUT, int64s, kernel

RECORD_COLUMNS = ("offset", "timestamp", "attributes", "key_start", "key_length", "value_start", "value_length",
                  "header_first", "header_count")
HEADER_COLUMNS = ("header_key_start", "header_key_length", "header_value_start", "header_value_length")
_RECORD_COLUMNS_TYPE = types.UniTuple(INT64S_OUT, len(RECORD_COLUMNS))
_HEADER_COLUMNS_TYPE = types.UniTuple(INT64S_OUT, len(HEADER_COLUMNS))


class DecodedRecords(NamedTuple):
    offset: np.ndarray
    timestamp: np.ndarray
    attributes: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    header_first: np.ndarray
    header_count: np.ndarray
    header_key_start: np.ndarray
    header_key_length: np.ndarray
    header_value_start: np.ndarray
    header_value_length: np.ndarray
    batch_first: np.ndarray  # per input batch: its first row (len = batches decoded + 1)
    error_batch: int


@njit(cache=True, nogil=True, inline="always")
def _varint(buf, pos, end, max_bytes):
    """Zig-zag varint at ``pos``; returns (value, next position), next = -1 when malformed."""
    if pos < end and buf[pos] < 0x80:  # one byte: the common case for lengths and deltas
        raw = np.int64(buf[pos])
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw = np.int64(0)
    shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            return np.int64(0), -1
        b = np.int64(buf[pos + i])
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return ((raw >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(raw & 1), pos + i + 1
        shift += 7
    return np.int64(0), -1


@njit(cache=True, nogil=True, inline="always")
def _span(buf, pos, end, min_length):
    """A length varint and the bytes it announces; next position -1 when they do not fit."""
    length, p = _varint(buf, pos, end, 5)
    if p < 0 or length < min_length or p + max(length, 0) > end:
        return length, -1
    return length, p


_MALFORMED = -1
_NO_HEADER_ROOM = -2


@kernel((BYTES, *(types.int64,) * 8, _RECORD_COLUMNS_TYPE, _HEADER_COLUMNS_TYPE))
def _decode_batch(buf, pos, end, count, base_offset, base_timestamp, log_append_time, n, nh, rec, hdr):
    """Records of one batch from row ``n`` / header row ``nh``; returns the rows
    after it, or (_MALFORMED | _NO_HEADER_ROOM, _).  Early returns, not flags:
    numba compiles this shape to a much tighter loop."""
    offset, timestamp, attributes, key_start, key_length, value_start, value_length, header_first, header_count = rec
    hk_start, hk_length, hv_start, hv_length = hdr
    for _ in range(count):
        length, p = _varint(buf, pos, end, 5)
        if p < 0 or length < 1 or p + length > end:
            return _MALFORMED, nh
        rec_end = p + length
        attributes[n] = buf[p]
        ts_delta, p = _varint(buf, p + 1, rec_end, 10)
        if p < 0:
            return _MALFORMED, nh
        offset_delta, p = _varint(buf, p, rec_end, 5)
        if p < 0:
            return _MALFORMED, nh
        key_len, p = _span(buf, p, rec_end, -1)
        if p < 0:
            return _MALFORMED, nh
        key_start[n] = p
        key_length[n] = key_len
        p += max(key_len, 0)
        value_len, p = _span(buf, p, rec_end, -1)
        if p < 0:
            return _MALFORMED, nh
        value_start[n] = p
        value_length[n] = value_len
        p += max(value_len, 0)
        n_headers, p = _varint(buf, p, rec_end, 5)
        if p < 0 or n_headers < 0:
            return _MALFORMED, nh
        header_first[n] = nh
        header_count[n] = n_headers
        for _h in range(n_headers):
            if nh == hk_start.shape[0]:
                return _NO_HEADER_ROOM, nh
            hk_len, p = _span(buf, p, rec_end, 0)
            if p < 0:
                return _MALFORMED, nh
            hk_start[nh] = p
            hk_length[nh] = hk_len
            p += hk_len
            hv_len, p = _span(buf, p, rec_end, -1)
            if p < 0:
                return _MALFORMED, nh
            hv_start[nh] = p
            hv_length[nh] = hv_len
            p += max(hv_len, 0)
            nh += 1
        if p != rec_end:
            return _MALFORMED, nh
        offset[n] = base_offset + offset_delta
        timestamp[n] = log_append_time if log_append_time >= 0 else base_timestamp + ts_delta
        n += 1
        pos = rec_end
    if pos != end:
        return _MALFORMED, nh
    return n, nh


@kernel((BYTES, *(INT64S,) * 6, _RECORD_COLUMNS_TYPE, _HEADER_COLUMNS_TYPE, INT64S_OUT))
def _decode(buf, starts, ends, base_offsets, base_timestamps, counts, log_append_times, rec, hdr, batch_first):
    """Fill the preallocated columns; returns (records, headers, error batch),
    headers = -1 when ``hdr`` ran out of room and the call must be repeated."""
    n = 0
    nh = 0
    batch_first[0] = 0
    for b in range(starts.shape[0]):
        if counts[b] < 0 or not 0 <= starts[b] <= ends[b] <= buf.shape[0]:
            return n, nh, b
        next_n, next_nh = _decode_batch(buf, starts[b], ends[b], counts[b], base_offsets[b], base_timestamps[b],
                                        log_append_times[b], n, nh, rec, hdr)
        if next_n == _NO_HEADER_ROOM:
            return n, -1, -1
        if next_n == _MALFORMED:
            return n, nh, b
        n = next_n
        nh = next_nh
        batch_first[b + 1] = n
    return n, nh, -1


def _columns(count: int, size: int) -> tuple:
    return tuple(np.empty(size, np.int64) for _ in range(count))


def decode_records(
    buf: np.ndarray,
    starts,
    ends,
    base_offsets,
    base_timestamps,
    counts,
    log_append_times=None,
) -> DecodedRecords:
    """Decode the records of each batch ``i`` in ``buf[starts[i]:ends[i]]``."""
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.ndim != 1 or not buf.flags.c_contiguous:
        raise TypeError("buf must be a C-contiguous one-dimensional uint8 array")
    per_batch = (int64s(starts), int64s(ends), int64s(base_offsets), int64s(base_timestamps), int64s(counts))
    n_batches = len(per_batch[0])
    lat = np.full(n_batches, -1, np.int64) if log_append_times is None else int64s(log_append_times)
    if len({len(c) for c in per_batch} | {len(lat)}) != 1:
        raise ValueError("the per-batch arrays must have one length")
    total = int(np.clip(per_batch[4], 0, None).sum())
    rec = _columns(len(RECORD_COLUMNS), total)
    header_room = max(total, 16)
    batch_first = np.empty(n_batches + 1, np.int64)
    while True:
        hdr = _columns(len(HEADER_COLUMNS), header_room)
        n, nh, error_batch = _decode(buf, *per_batch, lat, rec, hdr, batch_first)
        if nh >= 0:
            break
        header_room *= 4
    done = n_batches if error_batch < 0 else error_batch
    return DecodedRecords(*(c[:n] for c in rec), *(c[:nh] for c in hdr), batch_first=batch_first[: done + 1],
                          error_batch=int(error_batch))
