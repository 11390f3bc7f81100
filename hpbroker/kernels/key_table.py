"""Record-key hashes and an open-addressing table of key hash -> offset, for
the log cleaner's offset map (``hpbroker.storage.offset_map`` grows and
bounds the table; the loops are here).

A key is kept only as its 128-bit hash: FNV-1a and a multiply-rotate hash of
its bytes, each finished with splitmix64's finaliser.  The table is three
parallel arrays with linear probing: ``hash1``, ``hash2`` (uint64) and
``offset`` (int64, -1 = empty slot), 24 bytes a slot.
"""

import numpy as np
from numba import njit, types

from hpbroker.kernels.jit import BYTES, INT64S, INT64S_OUT, int64s, kernel

HASHES = types.Array(types.uint64, 1, "C", readonly=True)
HASHES_OUT = types.Array(types.uint64, 1, "C")
MASK = types.Array(types.boolean, 1, "C", readonly=True)

EMPTY = np.int64(-1)

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_SEED2 = np.uint64(0x9E3779B97F4A7C15)
_MUL2 = np.uint64(0xFF51AFD7ED558CCD)


@njit(cache=True, nogil=True, inline="always")
def _finish(h):
    # splitmix64's finaliser: spreads every input bit over the whole word.
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


@kernel((BYTES, INT64S, INT64S, HASHES_OUT, HASHES_OUT))
def _hash_keys(buf, key_start, key_length, out1, out2):
    """FNV-1a and a multiply-rotate hash of each key, both finalised; null
    keys (length -1) get 0, 0 and must be masked out by the caller."""
    for i in range(key_start.shape[0]):
        length = key_length[i]
        if length < 0:
            out1[i] = 0
            out2[i] = 0
            continue
        h1 = _FNV_OFFSET
        h2 = _SEED2 ^ np.uint64(length)
        start = key_start[i]
        for j in range(start, start + length):
            b = np.uint64(buf[j])
            h1 = (h1 ^ b) * _FNV_PRIME
            h2 = (h2 ^ b) * _MUL2
            h2 = (h2 << np.uint64(31)) | (h2 >> np.uint64(33))
        out1[i] = _finish(h1 ^ np.uint64(length))
        out2[i] = _finish(h2)


@njit(cache=True, nogil=True, inline="always")
def _slot(t1, t2, toff, a, b):
    """Linear probe from the key's home slot: its slot, or the empty one where it would go."""
    slots_mask = np.uint64(t1.shape[0] - 1)
    s = a & slots_mask
    while True:
        k = np.int64(s)
        if toff[k] == EMPTY or (t1[k] == a and t2[k] == b):
            return k
        s = (s + np.uint64(1)) & slots_mask


@kernel((HASHES_OUT, HASHES_OUT, INT64S_OUT, HASHES, HASHES, INT64S, MASK, types.int64))
def _put(t1, t2, toff, h1, h2, offsets, mask, used):
    """Insert each masked (hash, offset); a later offset replaces an earlier
    one.  Returns the number of used slots."""
    for i in range(h1.shape[0]):
        if not mask[i]:
            continue
        k = _slot(t1, t2, toff, h1[i], h2[i])
        if toff[k] == EMPTY:
            t1[k] = h1[i]
            t2[k] = h2[i]
            toff[k] = offsets[i]
            used += 1
        elif offsets[i] > toff[k]:
            toff[k] = offsets[i]
    return used


@kernel((HASHES, HASHES, INT64S, HASHES, HASHES, MASK, INT64S_OUT))
def _get(t1, t2, toff, h1, h2, mask, out):
    """Latest offset of each masked key, -1 when absent."""
    for i in range(h1.shape[0]):
        out[i] = EMPTY
        if mask[i]:
            out[i] = toff[_slot(t1, t2, toff, h1[i], h2[i])]


def hash_keys(buf: np.ndarray, key_start: np.ndarray, key_length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two 64-bit hashes of every key ``buf[key_start:key_start+key_length]``."""
    n = len(key_start)
    out1, out2 = np.empty(n, np.uint64), np.empty(n, np.uint64)
    _hash_keys(np.ascontiguousarray(buf, np.uint8), int64s(key_start), int64s(key_length), out1, out2)
    return out1, out2


def table_put(t1: np.ndarray, t2: np.ndarray, toff: np.ndarray, h1: np.ndarray, h2: np.ndarray,
              offsets: np.ndarray, mask: np.ndarray, used: int) -> int:
    """Insert each masked (hash, offset) into the table (a later offset replaces
    an earlier one); the number of used slots after."""
    return int(_put(t1, t2, toff, _hashes(h1), _hashes(h2), int64s(offsets), np.ascontiguousarray(mask, np.bool_),
                    used))


def table_get(t1: np.ndarray, t2: np.ndarray, toff: np.ndarray, h1: np.ndarray, h2: np.ndarray,
              mask: np.ndarray) -> np.ndarray:
    """The offset of each masked key, -1 when absent."""
    out = np.empty(len(h1), np.int64)
    _get(t1, t2, toff, _hashes(h1), _hashes(h2), np.ascontiguousarray(mask, np.bool_), out)
    return out


def _hashes(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, np.uint64)
