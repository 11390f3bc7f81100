"""The batch-scan kernel against a plain-Python twin, on valid and damaged segments."""

import struct
import zlib

import crc32c as crc32c_library
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.kernels import batch_scan as bs, layout, scan_batches
from hpbroker.records import Record, encode_batch, encode_message_set

MIN_LENGTH = {2: layout.BATCH_HEADER_SIZE - 12, 1: layout.LEGACY_V1_MIN_SIZE - 12, 0: layout.LEGACY_V0_MIN_SIZE - 12}


def python_scan(data: bytes, start=0, end=None, verify_crc=True, max_batches=None, stop_at_invalid=True):
    """Twin of ``scan_batches``: same rows, stop code and stop position."""
    end = len(data) if end is None else min(end, len(data))
    rows, pos, stop = [], start, bs.STOP_END
    while pos < end:
        if max_batches is not None and len(rows) == max_batches:
            stop = bs.STOP_LIMIT
            break
        if pos + 17 > end:
            stop = bs.STOP_TORN if pos + 17 > len(data) else bs.STOP_LIMIT
            break
        length, magic = struct.unpack_from(">i", data, pos + 8)[0], data[pos + 16]
        if magic not in MIN_LENGTH:
            stop = bs.STOP_BAD_MAGIC
            break
        if length < MIN_LENGTH[magic]:
            stop = bs.STOP_BAD_LENGTH
            break
        size = length + 12
        if pos + size > end:
            stop = bs.STOP_TORN if pos + size > len(data) else bs.STOP_LIMIT
            break
        entry = data[pos:pos + size]
        ok = True
        if verify_crc:
            if magic == 2:
                ok = struct.unpack_from(">I", entry, 17)[0] == crc32c_library.crc32c(entry[21:])
            else:
                ok = struct.unpack_from(">I", entry, 12)[0] == zlib.crc32(entry[16:])
            if not ok and stop_at_invalid:
                stop = bs.STOP_BAD_CRC
                break
        base = struct.unpack_from(">q", entry)[0]
        if magic == 2:
            (epoch, _, _, attrs, delta, base_ts, max_ts, pid, pepoch, seq,
             count) = struct.unpack_from(">ibIhiqqqhii", entry, 12)
            row = (pos, size, base, base + delta, max_ts, base_ts, count, attrs, magic, int(ok), epoch, pid, pepoch,
                   seq)
        else:
            ts = struct.unpack_from(">q", entry, 18)[0] if magic == 1 else -1
            row = (pos, size, base, base, ts, ts, 1, entry[17], magic, int(ok), -1, -1, -1, -1)
        rows.append(row)
        pos += size
    return rows, stop, pos


def kernel_rows(scan):
    return [tuple(int(getattr(scan, name)[i]) for name in bs.COLUMNS) for i in range(len(scan.position))]


def assert_twins_agree(data: bytes, **kwargs):
    scan = scan_batches(np.frombuffer(data, np.uint8), **kwargs)
    rows, stop, valid_end = python_scan(data, **kwargs)
    assert kernel_rows(scan) == rows
    assert (scan.stop, scan.valid_end) == (stop, valid_end)
    return scan


def v2_batch(base: int, n: int, *, codec=0, ts=1_700_000_000_000) -> bytes:
    records = [Record(offset=base + i, timestamp=ts + i, key=b"k%d" % i, value=b"v" * (i * 7)) for i in range(n)]
    return encode_batch(records, base_offset=base, compression=codec, producer_id=7, producer_epoch=1,
                        base_sequence=base)


entries = st.one_of(
    st.builds(lambda n, c: ("v2", n, c), st.integers(1, 20), st.sampled_from([0, 1, 3])),
    st.builds(lambda m: ("legacy", m, 0), st.sampled_from([0, 1])),
)


def build(specs) -> bytes:
    out, offset = [], 0
    for kind, n, codec in specs:
        if kind == "v2":
            out.append(v2_batch(offset, n, codec=codec))
            offset += n
        else:
            out.append(encode_message_set([Record(offset, 1_700_000_000_000, b"k", b"legacy")], magic=n))
            offset += 1
    return b"".join(out)


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(entries, max_size=12), cut=st.integers(0, 4000), noise=st.binary(max_size=40))
def test_scan_matches_twin_on_whole_torn_and_garbage_tails(specs, cut, noise):
    data = build(specs)
    assert_twins_agree(data)
    assert_twins_agree(data[: min(cut, len(data))])  # a torn write
    assert_twins_agree(data + noise)  # an appended nonsense block


@settings(max_examples=40, deadline=None)
@given(specs=st.lists(entries, min_size=1, max_size=8), flip=st.integers(0, 10_000), limit=st.integers(0, 5000),
       max_batches=st.none() | st.integers(0, 5))
def test_scan_matches_twin_on_flipped_bytes_and_limits(specs, flip, limit, max_batches):
    data = bytearray(build(specs))
    data[flip % len(data)] ^= 0x5A
    for stop_at_invalid in (True, False):
        for verify_crc in (True, False):
            assert_twins_agree(bytes(data), verify_crc=verify_crc, stop_at_invalid=stop_at_invalid)
    assert_twins_agree(bytes(data), end=limit, max_batches=max_batches, verify_crc=False)


def test_every_stop_reason_is_reported_where_it_happens():
    good = v2_batch(0, 3)
    assert assert_twins_agree(good).stop == bs.STOP_END
    assert assert_twins_agree(good + good[:30]).stop == bs.STOP_TORN
    bad_magic = bytearray(good)
    bad_magic[layout.MAGIC] = 7
    assert assert_twins_agree(good + bytes(bad_magic)).stop == bs.STOP_BAD_MAGIC
    short = bytearray(good)
    short[8:12] = struct.pack(">i", 10)
    scan = assert_twins_agree(good + bytes(short))
    assert (scan.stop, scan.valid_end) == (bs.STOP_BAD_LENGTH, len(good))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    scan = assert_twins_agree(bytes(bad_crc) + good)
    assert (scan.stop, scan.valid_end, len(scan.position)) == (bs.STOP_BAD_CRC, 0, 0)
    scan = assert_twins_agree(bytes(bad_crc) + good, stop_at_invalid=False)
    assert scan.crc_ok.tolist() == [0, 1] and scan.stop == bs.STOP_END
    assert assert_twins_agree(good + good, end=len(good) + 5).stop == bs.STOP_LIMIT


def test_scan_columns_describe_the_batch():
    data = v2_batch(40, 5, codec=layout.CODEC_GZIP)
    scan = scan_batches(np.frombuffer(data, np.uint8))
    assert scan.base_offset.tolist() == [40] and scan.last_offset.tolist() == [44]
    assert scan.record_count.tolist() == [5] and scan.size.tolist() == [len(data)]
    assert scan.attributes[0] & layout.COMPRESSION_MASK == layout.CODEC_GZIP
    assert (scan.producer_id[0], scan.producer_epoch[0], scan.base_sequence[0]) == (7, 1, 40)
    assert scan.max_timestamp[0] == 1_700_000_000_004


def test_scan_rejects_a_wrong_dtype_and_a_bad_start():
    with pytest.raises(TypeError):
        scan_batches(np.zeros(8, np.int64))
    with pytest.raises(ValueError):
        scan_batches(np.zeros(8, np.uint8), start=9)
