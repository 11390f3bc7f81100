"""The index-plan kernel against a plain-Python twin of Kafka's index rule."""

import numpy as np
from hypothesis import given, settings, strategies as st

from hpbroker.kernels import plan_index_entries


def python_plan(sizes, max_timestamps, interval):
    positions = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist() if sizes else []
    offsets, times = [], []
    since, max_ts, max_ts_offset, last_time = 0, -1, -1, -1
    for i, (size, ts) in enumerate(zip(sizes, max_timestamps)):
        if ts > max_ts:
            max_ts, max_ts_offset = ts, 10 * i + 9
        if since > interval:
            offsets.append((10 * i + 9, positions[i]))
            if max_ts > last_time:
                times.append((max_ts, max_ts_offset))
                last_time = max_ts
            since = 0
        since += size
    return offsets, times, since


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(61, 9000), st.integers(0, 10_000)), max_size=60),
       interval=st.sampled_from([0, 100, 4096]))
def test_plan_matches_twin(batches, interval):
    sizes = [s for s, _ in batches]
    stamps = [t for _, t in batches]
    positions = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if sizes else np.zeros(0)
    last_offsets = np.arange(len(sizes)) * 10 + 9
    plan = plan_index_entries(positions, np.array(sizes, np.int64), last_offsets, np.array(stamps, np.int64), interval)
    offsets, times, since = python_plan(sizes, stamps, interval)
    assert list(zip(plan.offset_keys.tolist(), plan.offset_positions.tolist())) == offsets
    assert list(zip(plan.time_stamps.tolist(), plan.time_offsets.tolist())) == times
    assert plan.bytes_since_last_entry == since
