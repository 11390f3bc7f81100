"""The record-decode kernel against a plain-Python twin and against the codec."""

import numpy as np
from hypothesis import given, settings, strategies as st

from hpbroker.kernels import decode_records, layout, scan_batches
from hpbroker.records import Header, Record, decode_batch, encode_batch


def python_varint(buf: bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """(value, position after it), or (0, -1) if no varint ends in time (the value is then meaningless)."""
    raw = 0
    for i in range(max_bytes):
        if pos + i >= end:
            return 0, -1
        raw |= (buf[pos + i] & 0x7F) << (7 * i)
        if buf[pos + i] < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
    return 0, -1


def python_decode(buf: bytes, start: int, end: int, base_offset: int, base_ts: int, count: int):
    """Twin of the kernel for one batch: rows (offset, ts, attrs, key span, value span, header spans) or None."""
    rows, pos = [], start
    for _ in range(count):
        length, p = python_varint(buf, pos, end, 5)
        if p < 0 or length < 1 or p + length > end:
            return None
        rec_end = p + length
        attrs = buf[p]
        ts_delta, p = python_varint(buf, p + 1, rec_end, 10)
        offset_delta, p = python_varint(buf, p, rec_end, 5) if p >= 0 else (0, -1)
        spans = []
        for field in ("key", "value"):
            n, p = python_varint(buf, p, rec_end, 5) if p >= 0 else (0, -1)
            if p < 0 or n < -1 or p + max(n, 0) > rec_end:
                return None
            spans.append((p, n))
            p += max(n, 0)
        n_headers, p = python_varint(buf, p, rec_end, 5)
        if p < 0 or n_headers < 0:
            return None
        headers = []
        for _h in range(n_headers):
            hk, p = python_varint(buf, p, rec_end, 5)
            if p < 0 or hk < 0 or p + hk > rec_end:
                return None
            key_span = (p, hk)
            p += hk
            hv, p = python_varint(buf, p, rec_end, 5)
            if p < 0 or hv < -1 or p + max(hv, 0) > rec_end:
                return None
            headers.append(key_span + (p, hv))
            p += max(hv, 0)
        if p != rec_end:
            return None
        rows.append((base_offset + offset_delta, base_ts + ts_delta, attrs, *spans[0], *spans[1], tuple(headers)))
        pos = rec_end
    return rows if pos == end else None


def kernel_rows(d, buf_rows: slice):
    rows = []
    for i in range(buf_rows.start, buf_rows.stop):
        first, n = int(d.header_first[i]), int(d.header_count[i])
        headers = tuple((int(d.header_key_start[j]), int(d.header_key_length[j]), int(d.header_value_start[j]),
                         int(d.header_value_length[j])) for j in range(first, first + n))
        rows.append((int(d.offset[i]), int(d.timestamp[i]), int(d.attributes[i]), int(d.key_start[i]),
                     int(d.key_length[i]), int(d.value_start[i]), int(d.value_length[i]), headers))
    return rows


def decode_segment(data: bytes):
    view = np.frombuffer(data, np.uint8)
    scan = scan_batches(view)
    return scan, decode_records(view, scan.position + layout.BATCH_HEADER_SIZE, scan.position + scan.size,
                                scan.base_offset, scan.base_timestamp, scan.record_count)


def span(buf: bytes, start: int, length: int):
    return None if length < 0 else buf[start:start + length]


blobs = st.none() | st.binary(max_size=300)
records = st.lists(st.tuples(blobs, blobs, st.lists(st.tuples(st.binary(max_size=10), blobs), max_size=3),
                             st.integers(-(1 << 40), 1 << 40)), min_size=1, max_size=15)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(records, min_size=1, max_size=5))
def test_kernel_matches_twin_and_codec(batches):
    data, offset = b"", 100
    for spec in batches:
        recs = [Record(offset + i, 1_700_000_000_000 + dt, k, v, tuple(Header(hk, hv) for hk, hv in h))
                for i, (k, v, h, dt) in enumerate(spec)]
        data += encode_batch(recs, base_offset=offset)
        offset += len(recs) + 3
    scan, d = decode_segment(data)
    assert d.error_batch == -1 and len(d.batch_first) == len(batches) + 1
    for b in range(len(batches)):
        start = int(scan.position[b])
        twin = python_decode(data, start + 61, start + int(scan.size[b]), int(scan.base_offset[b]),
                             int(scan.base_timestamp[b]), int(scan.record_count[b]))
        rows = slice(int(d.batch_first[b]), int(d.batch_first[b + 1]))
        assert kernel_rows(d, rows) == twin
        for i, record in zip(range(rows.start, rows.stop), decode_batch(data, start).records):
            assert (int(d.offset[i]), int(d.timestamp[i])) == (record.offset, record.timestamp)
            assert span(data, d.key_start[i], d.key_length[i]) == record.key
            assert span(data, d.value_start[i], d.value_length[i]) == record.value
            first = int(d.header_first[i])
            got = [(span(data, d.header_key_start[j], d.header_key_length[j]),
                    span(data, d.header_value_start[j], d.header_value_length[j]))
                   for j in range(first, first + int(d.header_count[i]))]
            assert got == [(h.key, h.value) for h in record.headers]


@settings(max_examples=60, deadline=None)
@given(flip=st.integers(0, 10_000), value=st.integers(0, 255))
def test_damaged_records_stop_at_their_batch_like_the_twin(flip, value):
    good = encode_batch([Record(i, 5 + i, b"key", b"value %d" % i, (Header(b"h", b"x"),)) for i in range(4)])
    damaged = bytearray(good)
    damaged[61 + flip % (len(good) - 61)] = value
    data = good + bytes(damaged)
    view = np.frombuffer(data, np.uint8)
    starts = np.array([61, len(good) + 61])
    ends = np.array([len(good), len(data)])
    d = decode_records(view, starts, ends, [0, 4], [5, 5], [4, 4])
    twin = python_decode(data, len(good) + 61, len(data), 4, 5, 4)
    if twin is None:
        assert d.error_batch == 1 and len(d.offset) == 4
    else:
        assert d.error_batch == -1 and kernel_rows(d, slice(4, 8)) == twin


def test_log_append_time_replaces_record_timestamps():
    data = encode_batch([Record(i, 10 + i, None, b"v") for i in range(3)])
    view = np.frombuffer(data, np.uint8)
    d = decode_records(view, [61], [len(data)], [0], [10], [3], log_append_times=[999])
    assert d.timestamp.tolist() == [999, 999, 999]


def test_a_declared_count_that_disagrees_is_an_error():
    data = encode_batch([Record(i, 0, None, b"v") for i in range(3)])
    view = np.frombuffer(data, np.uint8)
    for count in (2, 4):
        assert decode_records(view, [61], [len(data)], [0], [0], [count]).error_batch == 0


def test_more_headers_than_the_first_guess_of_room():
    headers = tuple(Header(b"h%d" % i, b"v%d" % i) for i in range(50))
    data = encode_batch([Record(0, 0, None, b"v", headers)])
    d = decode_records(np.frombuffer(data, np.uint8), [61], [len(data)], [0], [0], [1])
    assert d.error_batch == -1 and d.header_count.tolist() == [50]
    got = [data[s:s + n] for s, n in zip(d.header_key_start.tolist(), d.header_key_length.tolist())]
    assert got == [h.key for h in headers]
