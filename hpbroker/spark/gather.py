"""Arrow binary/string columns from (start, length) spans of a byte buffer.

An Arrow ``binary`` array is three buffers: a validity bitmap (bit i set =
row i not null, least significant bit first), ``n + 1`` int32 offsets into the
data, and the data bytes back to back.  The record-decode kernel gives each
key, value and header as a span of the segment (or of a decompressed body),
``length == -1`` meaning null, so building a column is one copy of those spans:
``_gather`` below, a numba loop (this package may not add to
``hpbroker.kernels``; it is a candidate to move there).

int32 offsets cap one column at 2 GiB; ``to_arrow`` splits larger chunks.

Output buffers come from Arrow's memory pool (mimalloc), which hands the same
warm pages back chunk after chunk; fresh numpy arrays of this size are new
mappings whose first touch costs more than the copy itself on our VMs.
"""

import numpy as np
import pyarrow as pa
from numba import njit

INT32_MAX = 2**31 - 1


@njit(cache=True, nogil=True)
def _gather(buf, starts, lengths, offsets, data):
    pos = 0
    for i in range(starts.shape[0]):
        offsets[i] = pos
        n = lengths[i]
        if n > 0:
            s = starts[i]
            data[pos:pos + n] = buf[s:s + n]
            pos += n
    offsets[starts.shape[0]] = pos


def total_bytes(lengths: np.ndarray) -> int:
    return int(np.clip(lengths, 0, None).sum())


def binary_array(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, type_=pa.binary()) -> pa.Array:
    """A ``binary`` (or ``string``) array of ``buf[starts[i]:starts[i]+lengths[i]]``, null where length < 0."""
    n = len(starts)
    size = total_bytes(lengths)
    if size > INT32_MAX:
        raise OverflowError(f"{size} bytes do not fit one Arrow binary column")
    offsets_buf, data_buf = pa.allocate_buffer(4 * (n + 1)), pa.allocate_buffer(size)
    offsets = np.frombuffer(offsets_buf, np.int32)
    data = np.frombuffer(data_buf, np.uint8)
    _gather(buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(lengths, np.int64), offsets, data)
    valid = lengths >= 0
    null_count = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(type_, n, [bitmap, offsets_buf, data_buf], null_count)


def pool_array(n: int, dtype) -> tuple[pa.Buffer, np.ndarray]:
    """A writable numpy array over a fresh buffer of Arrow's pool."""
    dtype = np.dtype(dtype)
    buf = pa.allocate_buffer(n * dtype.itemsize)
    return buf, np.frombuffer(buf, dtype)


def repeated_string(text: str, n: int) -> pa.Array:
    """``n`` copies of one string without a Python loop (the topic column)."""
    raw = text.encode()
    offsets = (np.arange(n + 1, dtype=np.int64) * len(raw)).astype(np.int32)
    data = np.frombuffer(raw * n, np.uint8) if n and raw else np.zeros(0, np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)], 0)


def list_offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out
