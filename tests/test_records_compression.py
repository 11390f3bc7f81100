"""The five codecs, and every framing of them that real clients send."""

import gzip
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings, strategies as st

from hpbroker.kernels import layout
from hpbroker.records import compression
from hpbroker.records.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    codec_name,
    compress,
    decompress,
    lz4_descriptor_end,
    lz4_header_checksum,
)
from hpbroker.records.errors import CorruptRecordError, UnknownCodecError

CODECS = [layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD]
# Compressible and long enough to span several xerial (32 KiB) and lz4 (64 KiB) blocks.
BIG = b"".join(b"%08d some repetitive payload;" % i for i in range(5_000))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=2_000) | st.just(b"") | st.just(BIG))
def test_round_trip(codec, data):
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    # Readers get memoryviews of a batch; that must work too.
    assert decompress(codec, memoryview(packed)) == data


def test_none_is_identity():
    assert compress(0, b"abc") == b"abc" == decompress(0, bytearray(b"abc"))


# --- gzip ---------------------------------------------------------------------------

def test_gzip_reads_several_members_as_one_stream():
    assert decompress(layout.CODEC_GZIP, gzip.compress(b"first ") + gzip.compress(b"second")) == b"first second"


def test_gzip_writes_rfc1952():
    assert compress(layout.CODEC_GZIP, b"x")[:2] == b"\x1f\x8b"


# --- snappy ---------------------------------------------------------------------------

def test_snappy_reads_raw_block():
    # librdkafka sends one raw snappy block for the whole payload.
    assert decompress(layout.CODEC_SNAPPY, snappy.compress(BIG)) == BIG


def _xerial(blocks: list[bytes]) -> bytes:
    """A xerial stream built by hand: magic, version 1, compat 1, int32-length blocks."""
    out = [XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for block in blocks:
        packed = snappy.compress(block)
        out += [struct.pack(">i", len(packed)), packed]
    return b"".join(out)


def test_snappy_single_zero_byte_is_the_empty_raw_stream():
    # Not garbage: a raw stream declaring length 0 (so b"\x00" must not be
    # mistaken for a corrupt payload).
    assert decompress(layout.CODEC_SNAPPY, b"\x00") == b""


def test_snappy_reads_xerial_framing():
    assert decompress(layout.CODEC_SNAPPY, _xerial([b"one ", b"two ", b"three"])) == b"one two three"


def test_snappy_writes_xerial_in_32k_blocks():
    # Kafka's Java producer writes xerial; every reader accepts it.
    packed = compress(layout.CODEC_SNAPPY, BIG)
    assert packed.startswith(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    pos, sizes = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        sizes.append(len(snappy.decompress(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert sizes[:-1] == [XERIAL_BLOCK_SIZE] * (len(sizes) - 1)
    assert sum(sizes) == len(BIG)


def test_snappy_reads_kafka_python_xerial():
    codec = pytest.importorskip("kafka.codec")
    packed = codec.snappy_encode(BIG, xerial_compatible=True, xerial_blocksize=4096)
    assert packed.startswith(XERIAL_MAGIC)
    assert decompress(layout.CODEC_SNAPPY, packed) == BIG


@pytest.mark.parametrize("stream", [
    XERIAL_MAGIC + b"\x00\x00\x00\x01",  # header cut short
    _xerial([b"abc"]) + b"\x00\x00",  # block length cut off
    _xerial([b"abc"]) + struct.pack(">i", 100) + b"xx",  # block runs past the end
    _xerial([b"abc"]) + struct.pack(">i", -1),  # negative block length
    _xerial([b"abc"])[:-1],  # last block's bytes cut
])
def test_snappy_bad_xerial_is_corrupt(stream):
    with pytest.raises(CorruptRecordError):
        decompress(layout.CODEC_SNAPPY, stream)


# --- lz4 ------------------------------------------------------------------------------

@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("block_checksum", [False, True])
@pytest.mark.parametrize("content_checksum", [False, True])
@pytest.mark.parametrize("block_linked", [False, True])
def test_lz4_reads_every_frame_option(store_size, block_checksum, content_checksum, block_linked):
    frame = lz4.frame.compress(BIG, store_size=store_size, block_checksum=block_checksum,
                               content_checksum=content_checksum, block_linked=block_linked,
                               block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    assert decompress(layout.CODEC_LZ4, frame) == BIG


def test_lz4_reads_concatenated_frames():
    # The LZ4 spec makes back-to-back frames one stream (librdkafka reads them so).
    assert decompress(layout.CODEC_LZ4, lz4.frame.compress(b"one ") + lz4.frame.compress(b"two")) == b"one two"


def test_lz4_bytes_after_the_frame_are_corrupt():
    # Not silently dropped: they are covered by the batch CRC, so a writer put them there.
    with pytest.raises(CorruptRecordError):
        decompress(layout.CODEC_LZ4, lz4.frame.compress(b"payload") + b"trailing")


def test_lz4_writes_what_kafka_java_writes():
    # Independent 64 KiB blocks (FLG bit 5), no content size (bit 3), no
    # content checksum (bit 2): Java's KafkaLZ4BlockInputStream rejects linked blocks.
    frame = compress(layout.CODEC_LZ4, BIG)
    assert frame[:4] == compression.LZ4_FRAME_MAGIC
    flg, bd = frame[4], frame[5]
    assert flg & 0x20, "blocks must be independent"
    assert not flg & 0x08, "no content size"
    assert not flg & 0x04, "no content checksum"
    assert (bd >> 4) & 0x07 == 4, "64 KiB maximum block size"


@pytest.mark.parametrize("store_size", [False, True])
def test_lz4_header_checksum_matches_the_library(store_size):
    frame = lz4.frame.compress(b"data", store_size=store_size)
    hc = lz4_descriptor_end(frame)
    assert hc == (14 if store_size else 6)
    assert lz4_header_checksum(frame) == frame[hc]


def _reference_xxh32(data: bytes) -> int:
    # lz4's content checksum is XXH32(content, seed 0), little-endian at the end.
    frame = lz4.frame.compress(data, content_checksum=True)
    return int.from_bytes(frame[-4:], "little")


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=40))
def test_xxh32_matches_lz4(data):
    assert compression._xxh32(data) == _reference_xxh32(data)


@pytest.mark.parametrize("store_size", [False, True])
def test_kafka3160_checksum_hashes_the_magic_too(store_size):
    frame = lz4.frame.compress(b"data", store_size=store_size)
    hc = lz4_descriptor_end(frame)
    expected = (_reference_xxh32(frame[:hc]) >> 8) & 0xFF
    assert lz4_header_checksum(frame, kafka3160=True) == expected


def test_lz4_descriptor_end_rejects_non_frames():
    with pytest.raises(CorruptRecordError):
        lz4_descriptor_end(b"\x00" * 10)
    with pytest.raises(CorruptRecordError):
        lz4_descriptor_end(compression.LZ4_FRAME_MAGIC + b"\x68\x40")  # content size flag, header cut


# --- zstd -------------------------------------------------------------------------------

def test_zstd_reads_frame_without_content_size():
    # librdkafka's streaming writer leaves the content size out.
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    cobj = cctx.compressobj()
    frame = cobj.compress(BIG) + cobj.flush()
    assert decompress(layout.CODEC_ZSTD, frame) == BIG


def test_zstd_reads_several_frames():
    cctx = zstandard.ZstdCompressor()
    assert decompress(layout.CODEC_ZSTD, cctx.compress(b"one ") + cctx.compress(b"two")) == b"one two"


def test_zstd_truncated_frame_is_corrupt():
    frame = zstandard.ZstdCompressor().compress(BIG)
    with pytest.raises(CorruptRecordError):
        decompress(layout.CODEC_ZSTD, frame[: len(frame) // 2])


# --- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("garbage", [b"\x01", b"garbage that is not compressed at all", bytes(range(256))])
def test_garbage_is_corrupt(codec, garbage):
    # Any library's error becomes CorruptRecordError.
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_payload_is_corrupt(codec):
    packed = compress(codec, BIG)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) - 10])


def test_gzip_bad_checksum_is_corrupt():
    packed = bytearray(gzip.compress(b"payload"))
    packed[-5] ^= 0xFF  # last byte of the CRC-32 trailer (then ISIZE, 4 bytes)
    with pytest.raises(CorruptRecordError):
        decompress(layout.CODEC_GZIP, bytes(packed))


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec(codec):
    with pytest.raises(UnknownCodecError):
        compress(codec, b"x")
    with pytest.raises(UnknownCodecError):
        decompress(codec, b"x")
    assert codec_name(codec) == f"unknown({codec})"


def test_unknown_codec_is_a_corrupt_record_error():
    # A codec id comes from the bytes, so callers handle it as bad data.
    assert issubclass(UnknownCodecError, CorruptRecordError)


def test_codec_names():
    assert [codec_name(c) for c in CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]
