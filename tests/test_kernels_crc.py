"""CRC kernels against their references: the crc32c C library and zlib."""

import zlib

import crc32c as crc32c_library
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.kernels import crc

# Sizes around every lane boundary of the interleaved kernel.
BOUNDARY_SIZES = sorted({0, 1, 7, 8, 9} | {k * lane + d for lane in (crc.TINY_LANE, crc.SHORT_LANE, crc.LONG_LANE)
                                          for k in (3, 6) for d in (-9, -1, 0, 1, 8)})


def python_crc32c(data: bytes, value: int = 0) -> int:
    """Bit-at-a-time twin of the kernels: the definition, nothing clever."""
    c = value ^ 0xFFFFFFFF
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ crc.CASTAGNOLI if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


@pytest.mark.parametrize("size", BOUNDARY_SIZES)
def test_both_crc32c_kernels_match_the_library(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    expected = crc32c_library.crc32c(data.tobytes())
    assert int(crc.crc32c_portable(data, 0, size, 0)) == expected
    if crc.HARDWARE:
        assert int(crc.crc32c_hardware(data, 0, size, 0)) == expected
    assert crc.crc32c(data) == expected


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=3000), cut=st.integers(0, 3000), start=st.integers(0, 40))
def test_crc32c_of_a_slice_continues_like_the_twin(data, cut, start):
    buf = np.frombuffer(data, np.uint8)
    start, cut = min(start, len(data)), min(max(cut, start), len(data))
    head = int(crc.crc32c_update(buf, start, cut, 0))
    assert head == python_crc32c(data[start:cut])
    assert int(crc.crc32c_update(buf, cut, len(data), head)) == python_crc32c(data[start:])


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=2000), seed=st.integers(0, 0xFFFFFFFF))
def test_crc32_ieee_matches_zlib(data, seed):
    assert crc.crc32(data, seed) == zlib.crc32(data, seed)


def test_known_check_values():
    # The standard check input "123456789" for both polynomials.
    assert crc.crc32c(b"123456789") == 0xE3069283
    assert crc.crc32(b"123456789") == 0xCBF43926


def test_rejects_non_uint8_arrays():
    with pytest.raises(TypeError):
        crc.crc32c(np.zeros(4, np.int32))
