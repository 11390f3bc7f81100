"""Which batches of a scanned segment get ``.index`` / ``.timeindex`` entries.

Kafka's rule, applied batch by batch in log order: first raise the running
maximum timestamp (remembering the last offset of the batch that holds it);
then, if more than ``interval`` bytes were appended since the previous entry,
add an offset entry ``(batch last offset, batch position)`` and a time entry
``(max timestamp so far, its offset)`` when that timestamp grew past the last
time entry; then count the batch's bytes.  The first batch of a segment is never
indexed because nothing precedes it.

Input: the parallel arrays of a batch scan.  Output: the entries as arrays plus
the running state, so appends can carry on from where a rebuild stopped.
The kernel takes contiguous int64 arrays and int64 scalars alone (see ``jit``).
"""

from typing import NamedTuple

import numpy as np
from numba import types

from hpbroker.kernels.jit import INT64S, int64s, kernel


class IndexPlan(NamedTuple):
    offset_keys: np.ndarray  # int64 absolute offsets
    offset_positions: np.ndarray  # int64 byte positions
    time_stamps: np.ndarray  # int64
    time_offsets: np.ndarray  # int64 absolute offsets
    bytes_since_last_entry: int
    max_timestamp: int
    offset_of_max_timestamp: int


@kernel((*(INT64S,) * 4, *(types.int64,) * 5))
def _plan(positions, sizes, last_offsets, max_timestamps, interval, bytes_since, max_ts, max_ts_offset,
          last_time_entry):
    n = positions.shape[0]
    off_keys = np.empty(n, np.int64)
    off_pos = np.empty(n, np.int64)
    t_stamps = np.empty(n, np.int64)
    t_offs = np.empty(n, np.int64)
    n_off = 0
    n_time = 0
    for i in range(n):
        if max_timestamps[i] > max_ts:
            max_ts = max_timestamps[i]
            max_ts_offset = last_offsets[i]
        if bytes_since > interval:
            off_keys[n_off] = last_offsets[i]
            off_pos[n_off] = positions[i]
            n_off += 1
            if max_ts > last_time_entry:
                t_stamps[n_time] = max_ts
                t_offs[n_time] = max_ts_offset
                last_time_entry = max_ts
                n_time += 1
            bytes_since = 0
        bytes_since += sizes[i]
    return off_keys[:n_off], off_pos[:n_off], t_stamps[:n_time], t_offs[:n_time], bytes_since, max_ts, max_ts_offset


def plan_index_entries(
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    interval: int,
    *,
    bytes_since_last_entry: int = 0,
    max_timestamp: int = -1,
    offset_of_max_timestamp: int = -1,
    last_time_entry: int = -1,
) -> IndexPlan:
    arrays = (int64s(positions), int64s(sizes), int64s(last_offsets), int64s(max_timestamps))
    if len({len(a) for a in arrays}) != 1:
        raise ValueError("positions, sizes, last_offsets and max_timestamps must have one length")
    return IndexPlan(
        *_plan(
            *arrays,
            np.int64(interval),
            np.int64(bytes_since_last_entry),
            np.int64(max_timestamp),
            np.int64(offset_of_max_timestamp),
            np.int64(last_time_entry),
        )
    )
