"""The cleaner's offset map: record key -> offset of its latest record.

Kafka's ``SkimpyOffsetMap`` in numpy: an open-addressing table (linear probing)
of three parallel arrays, ``hash1`` (uint64), ``hash2`` (uint64) and ``offset``
(int64, -1 = empty slot), 24 bytes a slot, kept at most half full.  A key is
stored only as its 128-bit hash (two independent 64-bit hashes of its bytes),
as Kafka stores the 16-byte MD5: two different keys sharing both halves would
make the cleaner treat them as one, which at 2**-128 per pair is never.

Nothing here is on disk; the map lives for one cleaning pass.  Its memory is
bounded by ``log.cleaner.dedupe.buffer.size``: a pass indexes dirty segments
only while their records fit (``can_take``), and cleans up to there.

The hash and table functions are numba-compiled like the kernels
(``hpbroker.kernels``) but live here because only the cleaner uses them.
"""

import numpy as np
from numba import njit

SLOT_BYTES = 24
_EMPTY = np.int64(-1)
_MAX_LOAD = 0.5

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


@njit(cache=True, nogil=True)
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
        if toff[k] == _EMPTY or (t1[k] == a and t2[k] == b):
            return k
        s = (s + np.uint64(1)) & slots_mask


@njit(cache=True, nogil=True)
def _put(t1, t2, toff, h1, h2, offsets, mask, used):
    """Insert each masked (hash, offset); a later offset replaces an earlier
    one.  Returns the number of used slots."""
    for i in range(h1.shape[0]):
        if not mask[i]:
            continue
        k = _slot(t1, t2, toff, h1[i], h2[i])
        if toff[k] == _EMPTY:
            t1[k] = h1[i]
            t2[k] = h2[i]
            toff[k] = offsets[i]
            used += 1
        elif offsets[i] > toff[k]:
            toff[k] = offsets[i]
    return used


@njit(cache=True, nogil=True)
def _get(t1, t2, toff, h1, h2, mask, out):
    """Latest offset of each masked key, -1 when absent."""
    for i in range(h1.shape[0]):
        out[i] = _EMPTY
        if mask[i]:
            out[i] = toff[_slot(t1, t2, toff, h1[i], h2[i])]


def hash_keys(buf: np.ndarray, key_start: np.ndarray, key_length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two 64-bit hashes of every key ``buf[key_start:key_start+key_length]``."""
    n = len(key_start)
    out1, out2 = np.empty(n, np.uint64), np.empty(n, np.uint64)
    _hash_keys(buf, np.ascontiguousarray(key_start, np.int64), np.ascontiguousarray(key_length, np.int64), out1, out2)
    return out1, out2


def _slots_for(entries: int) -> int:
    return 1 << max(4, int(np.ceil(entries / _MAX_LOAD)) - 1).bit_length()


class OffsetMap:
    """Key hash -> latest offset, growing as needed up to ``memory_bytes``."""

    def __init__(self, memory_bytes: int):
        self.max_entries = max(1, int(memory_bytes // SLOT_BYTES * _MAX_LOAD))
        self.used = 0
        self._alloc(_slots_for(16))

    def _alloc(self, slots: int) -> None:
        self._t1 = np.zeros(slots, np.uint64)
        self._t2 = np.zeros(slots, np.uint64)
        self._off = np.full(slots, -1, np.int64)

    def __len__(self) -> int:
        return self.used

    def can_take(self, records: int) -> bool:
        """Whether ``records`` more keys (at most, all new) fit in the memory bound."""
        return self.used + records <= self.max_entries

    def put(self, h1: np.ndarray, h2: np.ndarray, offsets: np.ndarray, mask: np.ndarray) -> None:
        """Record each masked key's offset (offsets increasing within a call)."""
        needed = _slots_for(self.used + int(np.count_nonzero(mask)))
        if needed > len(self._off):
            old = (self._t1, self._t2, self._off)
            self._alloc(needed)
            live = old[2] >= 0
            self.used = _put(self._t1, self._t2, self._off, old[0], old[1], old[2], live, 0)
        self.used = _put(self._t1, self._t2, self._off, h1, h2, np.ascontiguousarray(offsets, np.int64),
                         np.ascontiguousarray(mask, np.bool_), self.used)

    def get(self, h1: np.ndarray, h2: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = np.empty(len(h1), np.int64)
        _get(self._t1, self._t2, self._off, h1, h2, np.ascontiguousarray(mask, np.bool_), out)
        return out
