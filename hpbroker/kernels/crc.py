"""CRC-32C (Castagnoli; record batch v2) and CRC-32 (IEEE; legacy messages).

Both are reflected CRCs with initial value and final xor 0xFFFFFFFF.  The
jitted functions take ``(buf, start, end, crc)`` over a C-contiguous uint8
array and continue from a finished CRC ``crc`` (0 for a fresh one), so a caller
can checksum a slice of an mmap'd segment without copying it.

CRC-32C has two kernels, chosen once at import:

* hardware: x86's SSE4.2 ``crc32`` instruction, reached through an LLVM
  intrinsic.  It takes 8 bytes per instruction but has a latency of 3 cycles,
  so long inputs run three independent lanes over adjacent blocks and merge
  them: a lane's register is advanced over the next lane's length of zeros
  (a GF(2) multiplication by x^(8*len) mod P, tabulated per lane length) and
  xored with the next lane.
* portable: slicing-by-8 tables, for CPUs without SSE4.2.

CRC-32 (IEEE) only checks legacy messages, so it has the table kernel alone.

Every kernel takes ``CRC_SIGNATURE`` alone (see ``jit``): a read-only byte
buffer (a writable one passes as is) and int64 positions and CRC.  On a CPU
without SSE4.2 the hardware kernel is not compiled at all and
``crc32c_hardware`` is None.
"""

import numpy as np
from llvmlite import binding as _llvm_binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from hpbroker.kernels.jit import BYTES, kernel

CASTAGNOLI = 0x82F63B78  # reflected polynomial of CRC-32C
IEEE = 0xEDB88320  # reflected polynomial of CRC-32 (zlib)

# Lane lengths of the three-way interleave: long lanes for bulk data, shorter
# ones so the tail of a 1 KiB batch still gets interleaved.  Multiples of 8.
LONG_LANE = 4096
SHORT_LANE = 256
TINY_LANE = 64

# (buf, start, end, crc): the one signature of every CRC kernel.
CRC_SIGNATURE = (BYTES, types.int64, types.int64, types.int64)


# --- table construction (plain Python, once at import) -----------------------

def _slicing_tables(poly: int) -> np.ndarray:
    """tables[k][b]: the register after byte ``b`` followed by ``k`` zero bytes."""
    tables = np.zeros((8, 256), np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        tables[0, b] = c
    for k in range(1, 8):
        for b in range(256):
            prev = int(tables[k - 1, b])
            tables[k, b] = (prev >> 8) ^ int(tables[0, prev & 0xFF])
    return tables


def _gf2_multiply(a: int, b: int, poly: int) -> int:
    """a * b mod P, both in the reflected representation (bit 31 is x^0)."""
    product = 0
    for bit in range(31, -1, -1):
        if a & (1 << bit):
            product ^= b
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return product


def _x_to_the_8n(n: int, poly: int) -> int:
    """x^(8n) mod P, reflected: the operator that appends n zero bytes."""
    result, square = 1 << 31, 1 << 31 >> 8  # x^0 and x^8
    while n:
        if n & 1:
            result = _gf2_multiply(result, square, poly)
        square = _gf2_multiply(square, square, poly)
        n >>= 1
    return result


def _zeros_tables(n_bytes: int, poly: int) -> np.ndarray:
    """tables[k][b]: register ``b << 8k`` advanced over ``n_bytes`` zero bytes.
    Advancing is linear, so any register is the xor of its four bytes' rows."""
    op = _x_to_the_8n(n_bytes, poly)
    tables = np.zeros((4, 256), np.uint32)
    for k in range(4):
        for b in range(256):
            tables[k, b] = _gf2_multiply(op, b << (8 * k), poly)
    return tables


CASTAGNOLI_TABLES = _slicing_tables(CASTAGNOLI)
IEEE_TABLES = _slicing_tables(IEEE)
_LONG_SHIFT = _zeros_tables(LONG_LANE, CASTAGNOLI)
_SHORT_SHIFT = _zeros_tables(SHORT_LANE, CASTAGNOLI)
_TINY_SHIFT = _zeros_tables(TINY_LANE, CASTAGNOLI)


# --- portable kernel ---------------------------------------------------------

@njit(cache=True, nogil=True, inline="always")
def _sliced(tables, buf, start, end, crc):
    c = np.int64(crc) ^ 0xFFFFFFFF
    pos = start
    while end - pos >= 8:
        c ^= (np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8) | (np.int64(buf[pos + 2]) << 16)
              | (np.int64(buf[pos + 3]) << 24))
        t = (
            tables[7, c & 0xFF] ^ tables[6, (c >> 8) & 0xFF] ^ tables[5, (c >> 16) & 0xFF] ^ tables[4, c >> 24]
            ^ tables[3, buf[pos + 4]] ^ tables[2, buf[pos + 5]] ^ tables[1, buf[pos + 6]] ^ tables[0, buf[pos + 7]]
        )
        c = np.int64(t)
        pos += 8
    while pos < end:
        c = np.int64(tables[0, (c ^ buf[pos]) & 0xFF]) ^ (c >> 8)
        pos += 1
    return c ^ 0xFFFFFFFF


@kernel(CRC_SIGNATURE)
def crc32c_portable(buf, start, end, crc):
    return _sliced(CASTAGNOLI_TABLES, buf, start, end, crc)


@kernel(CRC_SIGNATURE)
def crc32_ieee(buf, start, end, crc):
    return _sliced(IEEE_TABLES, buf, start, end, crc)


# --- hardware kernel ---------------------------------------------------------

def cpu_has_sse42() -> bool:
    return bool(_llvm_binding.get_host_cpu_features().get("sse4.2", False))


HARDWARE = cpu_has_sse42()


@intrinsic
def _crc32_u64(typingctx, crc, data):
    """The SSE4.2 ``crc32 r64, r/m64`` instruction."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]),
                                            "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, args)
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _crc32_u8(typingctx, crc, data):
    """The SSE4.2 ``crc32 r32, r/m8`` instruction."""
    def codegen(context, builder, signature, args):
        i32, i8 = ir.IntType(32), ir.IntType(8)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, i8]),
                                            "llvm.x86.sse42.crc32.32.8")
        result = builder.call(fn, [builder.trunc(args[0], i32), builder.trunc(args[1], i8)])
        return builder.zext(result, ir.IntType(64))
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _load_le64(typingctx, array, index):
    """Eight bytes at ``array[index]`` as a little-endian int64: one unaligned load."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        pointer = builder.bitcast(builder.gep(data, [at]), ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)
    return types.int64(array, index), codegen


@njit(cache=True, nogil=True, inline="always")
def _advance(shift, c):
    return np.int64(shift[0, c & 0xFF] ^ shift[1, (c >> 8) & 0xFF] ^ shift[2, (c >> 16) & 0xFF]
                    ^ shift[3, (c >> 24) & 0xFF])


@njit(cache=True, nogil=True, inline="always")
def _three_lanes(buf, pos, lane, shift, c):
    c1 = np.int64(0)
    c2 = np.int64(0)
    for p in range(pos, pos + lane, 8):
        c = _crc32_u64(c, _load_le64(buf, p))  # pyright: ignore[reportCallIssue]  (numba passes the typing context)
        c1 = _crc32_u64(c1, _load_le64(buf, p + lane))  # pyright: ignore[reportCallIssue]  (numba passes the typing context)
        c2 = _crc32_u64(c2, _load_le64(buf, p + 2 * lane))  # pyright: ignore[reportCallIssue]  (numba passes the typing context)
    c = _advance(shift, c) ^ c1
    return _advance(shift, c) ^ c2


def crc32c_hardware(buf, start, end, crc):
    c = np.int64(crc) ^ 0xFFFFFFFF
    pos = start
    while end - pos >= 3 * LONG_LANE:
        c = _three_lanes(buf, pos, LONG_LANE, _LONG_SHIFT, c)
        pos += 3 * LONG_LANE
    while end - pos >= 3 * SHORT_LANE:
        c = _three_lanes(buf, pos, SHORT_LANE, _SHORT_SHIFT, c)
        pos += 3 * SHORT_LANE
    if end - pos >= 3 * TINY_LANE:
        c = _three_lanes(buf, pos, TINY_LANE, _TINY_SHIFT, c)
        pos += 3 * TINY_LANE
    while end - pos >= 8:
        c = _crc32_u64(c, _load_le64(buf, pos))  # pyright: ignore[reportCallIssue]  (numba passes the typing context)
        pos += 8
    while pos < end:
        c = _crc32_u8(c, np.int64(buf[pos]))  # pyright: ignore[reportCallIssue]  (numba passes the typing context)
        pos += 1
    return c ^ 0xFFFFFFFF


# Compiled only where the instruction exists (the name stays the kernel's: numba caches it by that name).
crc32c_hardware = kernel(CRC_SIGNATURE)(crc32c_hardware) if HARDWARE else None  # pyright: ignore[reportAssignmentType]
# The one the other kernels call; numba binds this global when they compile.
crc32c_update = crc32c_hardware if HARDWARE else crc32c_portable


def _as_uint8(data) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or not data.flags.c_contiguous:
            raise TypeError("expected a C-contiguous uint8 array")
        return data
    return np.frombuffer(data, np.uint8)


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of ``data`` (bytes-like or uint8 array), continuing from ``value``."""
    buf = _as_uint8(data)
    return int(crc32c_update(buf, 0, buf.shape[0], int(value)))


def crc32(data, value: int = 0) -> int:
    """CRC-32 (IEEE, as zlib) of ``data``, continuing from ``value``."""
    buf = _as_uint8(data)
    return int(crc32_ieee(buf, 0, buf.shape[0], int(value)))
