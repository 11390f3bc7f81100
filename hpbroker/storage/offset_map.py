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

The hashes and the table's loops are kernels (``hpbroker.kernels.key_table``),
compiled before the broker forks like every kernel: a cleaner's first pass
must not stall its worker in the compiler.
"""

import numpy as np

from hpbroker.kernels.key_table import table_get, table_put

SLOT_BYTES = 24
_MAX_LOAD = 0.5


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
            self.used = table_put(self._t1, self._t2, self._off, old[0], old[1], old[2], live, 0)
        self.used = table_put(self._t1, self._t2, self._off, h1, h2, offsets, mask, self.used)

    def get(self, h1: np.ndarray, h2: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return table_get(self._t1, self._t2, self._off, h1, h2, mask)
