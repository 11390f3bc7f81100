"""Compression codecs of Kafka record data: none, gzip, snappy, lz4, zstd.

In a v2 batch everything after the 61-byte header is compressed as one
payload; in a legacy (magic 0/1) wrapper message the value holds a compressed
inner message set.  The codec id is ``attributes & 0x07`` (see
``hpbroker.kernels.layout``).

gzip
    RFC 1952 members (Java's GZIPOutputStream).  Several members back to back
    are read as one stream.
snappy
    Two framings occur on the wire:

    * raw snappy, one block for the whole payload (librdkafka);
    * xerial's SnappyOutputStream (Java, kafka-python, aiokafka)::

          0  magic          8 bytes  b"\\x82SNAPPY\\x00"
          8  version        int32    1
          12 compatVersion  int32    1
          16 blocks...      int32 big-endian length, then that many bytes of
                            raw snappy, repeated until the end

    Both are read, told apart by the magic, which no valid raw stream can
    start with: after 0x82 0x53 (a declared length of 10 626 bytes) the next
    byte, "N", would be a back-reference with nothing yet to copy from.
    **We write xerial**,
    in 32 KiB blocks: it is what Apache Kafka itself writes (its producer, and
    its broker when it recompresses), so a batch hpbroker writes is the batch
    Kafka would have written; and every reader accepts it (Java's
    SnappyInputStream, librdkafka, kafka-python and aiokafka all look for the
    magic), while raw snappy is only accepted by Java because xerial's reader
    falls back to it.  Bounded blocks also keep decompression memory per
    block.
lz4
    The LZ4 frame format (magic 0x184D2204), read with or without content
    size, block checksums or content checksum; concatenated frames are one
    stream, as the LZ4 spec has it.  We write what Kafka's Java
    client writes: independent 64 KiB blocks, no checksums beyond the header's,
    no content size, because Java's reader rejects linked blocks.  (Messages
    of magic 0 carry a wrongly computed header checksum, KAFKA-3160; the
    legacy reader fixes it up with :func:`lz4_header_checksum`.)
zstd
    One or more zstd frames, which may lack the content size (librdkafka's
    streaming writer), so they are read with a streaming decompressor.

Any failure inside a codec becomes a :class:`CorruptRecordError`: the
callers deal with bad bytes, not with five libraries' exception types.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from typing import cast

import lz4.frame
import snappy
import zstandard

from hpbroker.kernels import layout
from hpbroker.records.errors import CorruptRecordError, UnknownCodecError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_COMPAT_VERSION = 1
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatVersion
XERIAL_BLOCK_SIZE = 32 * 1024  # Java's SnappyOutputStream default
_BLOCK_LENGTH = struct.Struct(">i")

LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian


def codec_name(codec: int) -> str:
    if 0 <= codec < len(layout.CODEC_NAMES):
        return layout.CODEC_NAMES[codec]
    return f"unknown({codec})"


def _unknown(codec: int) -> UnknownCodecError:
    return UnknownCodecError(f"unknown compression codec {codec} (known: 0-4, {', '.join(layout.CODEC_NAMES)})")


# --- snappy -------------------------------------------------------------------

def _xerial_compress(data: bytes) -> bytes:
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPAT_VERSION)]
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = snappy.compress(bytes(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: bytes) -> bytes:
    if len(data) < XERIAL_HEADER.size:
        raise CorruptRecordError("xerial snappy stream shorter than its 16-byte header")
    out = []
    pos = XERIAL_HEADER.size  # version fields are not checked: every writer uses 1/1
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError(f"xerial snappy block length cut off at byte {pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes at byte {pos} runs past the end ({end})")
        out.append(snappy.decompress(data[pos : pos + length]))
        pos += length
    return b"".join(out)


def is_xerial(data) -> bool:
    return bytes(data[:8]) == XERIAL_MAGIC


# --- zstd and lz4: frames back to back -----------------------------------------

def _read_frames(new_decompressor, data: bytes, codec: str) -> bytes:
    """Every frame of ``data``, as the formats define concatenated frames: one
    stream.  (lz4.frame.decompress would stop after the first and silently drop
    the rest.)  A cut frame yields what it can and no error; only eof says it
    ended, and bytes that are not a frame fail in the decompressor."""
    out = []
    rest = data
    while True:
        dobj = new_decompressor()
        out.append(dobj.decompress(rest))
        if not dobj.eof:
            raise CorruptRecordError(f"{codec} frame is truncated")
        rest = dobj.unused_data
        if not rest:
            return b"".join(out)


def _zstd_decompress(data: bytes) -> bytes:
    return _read_frames(lambda: zstandard.ZstdDecompressor().decompressobj(), data, "zstd")


def _lz4_decompress(data: bytes) -> bytes:
    return _read_frames(lz4.frame.LZ4FrameDecompressor, data, "lz4")


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (the LZ4 frame descriptor: 2 to 10 bytes).

    Pure Python is fine here: it runs over a handful of bytes per legacy
    LZ4 message, and no xxhash package is required.
    """
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & mask

    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed & mask, (seed - p1) & mask]
        while pos + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[pos : pos + 4], "little")
                v[i] = (rotl((v[i] + lane * p2) & mask, 13) * p1) & mask
                pos += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while pos + 4 <= n:
        h = (h + int.from_bytes(data[pos : pos + 4], "little") * p3) & mask
        h = (rotl(h, 17) * p4) & mask
        pos += 4
    while pos < n:
        h = (h + data[pos] * p5) & mask
        h = (rotl(h, 11) * p1) & mask
        pos += 1
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


def lz4_descriptor_end(frame) -> int:
    """Index of the header-checksum byte (HC) of an LZ4 frame.

    Frame start: magic(4) FLG(1) BD(1) [content size(8) if FLG bit 3]
    [dictionary id(4) if FLG bit 0] HC(1).
    """
    if len(frame) < 7 or bytes(frame[:4]) != LZ4_FRAME_MAGIC:
        raise CorruptRecordError("not an LZ4 frame (bad magic or too short)")
    flg = frame[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if end >= len(frame):
        raise CorruptRecordError("LZ4 frame header is cut off")
    return end


def lz4_header_checksum(frame, *, kafka3160: bool = False) -> int:
    """The HC byte an LZ4 frame header should carry.

    The specification hashes the descriptor (FLG up to HC); Kafka 0.8-0.10
    hashed it together with the 4 magic bytes (KAFKA-3160), and kept doing so
    for magic-0 messages for compatibility.
    """
    end = lz4_descriptor_end(frame)
    start = 0 if kafka3160 else 4
    return (_xxh32(bytes(frame[start:end])) >> 8) & 0xFF


# --- levels ---------------------------------------------------------------------
# Kafka's levels (compression.gzip.level, .lz4.level, .zstd.level: KIP-390), with
# its defaults; ``None`` keeps what compress() always wrote.
GZIP_DEFAULT_LEVEL = -1  # Deflater.DEFAULT_COMPRESSION: zlib's own default (6)
LZ4_DEFAULT_LEVEL = 9
ZSTD_DEFAULT_LEVEL = 3
_LZ4_FRAME_MAX_LEVEL = 16  # lz4.frame's top level (LZ4HC, 12+ all mean "max")

_per_thread = threading.local()


def _zstd_compressor(level: int) -> "zstandard.ZstdCompressor":
    """One compressor per level and thread: making one costs ~15 us, more than
    compressing a small batch, and they must not be shared between threads
    (the log cleaner compresses on its own thread)."""
    cache = getattr(_per_thread, "zstd", None)
    if cache is None:
        cache = _per_thread.zstd = {}
    found = cache.get(level)
    if found is None:
        found = cache[level] = zstandard.ZstdCompressor(level=level)
    return found


def _lz4_frame_level(level: int | None) -> int:
    """Kafka's lz4 level 9 (the default) is lz4-java's fast compressor and any
    other level its HC compressor at that level; lz4.frame's 0 is the fast one
    and 3-16 are HC (its 1-2 are fast too, so Kafka's 1-2 come out fast)."""
    if level is None or level == LZ4_DEFAULT_LEVEL:
        return 0
    return min(level, _LZ4_FRAME_MAX_LEVEL)


# --- dispatch -------------------------------------------------------------------

def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a payload with a Kafka codec id (0 none ... 4 zstd) at a Kafka
    level of that codec (ignored by none and snappy)."""
    data = bytes(data)
    if codec == layout.CODEC_NONE:
        return data
    if codec == layout.CODEC_GZIP:
        return gzip.compress(data, compresslevel=9 if level is None else level)
    if codec == layout.CODEC_SNAPPY:
        return _xerial_compress(data)
    if codec == layout.CODEC_LZ4:
        return lz4.frame.compress(
            data, compression_level=_lz4_frame_level(level), block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False, content_checksum=False, store_size=False)
    if codec == layout.CODEC_ZSTD:
        return _zstd_compressor(ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    raise _unknown(codec)


def decompress(codec: int, data) -> bytes:
    """Decompress a payload; corrupt input raises CorruptRecordError."""
    data = bytes(data)
    if codec == layout.CODEC_NONE:
        return data
    if not 0 < codec < len(layout.CODEC_NAMES):
        raise _unknown(codec)
    try:
        if codec == layout.CODEC_GZIP:
            return gzip.decompress(data)
        if codec == layout.CODEC_SNAPPY:
            # python-snappy types decompress() bytes | str: str only when asked to decode
            return _xerial_decompress(data) if is_xerial(data) else cast(bytes, snappy.decompress(data))
        if codec == layout.CODEC_LZ4:
            return _lz4_decompress(data)
        return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except (OSError, EOFError, zlib.error, snappy.UncompressError, RuntimeError, zstandard.ZstdError,
            ValueError) as exc:
        # gzip: BadGzipFile (OSError), EOFError, zlib.error; lz4: RuntimeError;
        # snappy: UncompressError; zstd: ZstdError.
        raise CorruptRecordError(
            f"{codec_name(codec)} payload of {len(data)} bytes cannot be decompressed: {exc}") from exc
