"""Recompress a v2 record batch into another codec, as a broker with a topic
``compression.type`` other than ``producer`` does (Kafka's LogValidator).

In a v2 batch only the records part is compressed, and each record's offset
and timestamp are deltas from the header's base offset and base timestamp.
So the header is kept whole (base offset, base and max timestamps, producer
id, epoch and base sequence, partition leader epoch, the transactional and
timestamp-type bits), the records part is decompressed and compressed again
byte for byte, and only the codec bits, the batch length and the CRC change.

Which batches Kafka rebuilds, and which it keeps as they came:

* a batch already in the target codec is kept, whatever level it was written
  at: Kafka compares the codec, not the level;
* a control batch (transaction marker) is kept: Kafka never compresses the
  uncompressed ones it writes, and the compressed ones that no writer
  produces it would rebuild as data batches, losing the control bit;
* every other batch is rebuilt in the target codec (``uncompressed`` too).
"""

from __future__ import annotations

import struct

import numpy as np
from crc32c import crc32c

from hpbroker.kernels import layout
from hpbroker.kernels.record_decode import decode_records
from hpbroker.records.batch import compute_crc, read_header
from hpbroker.records.compression import codec_name, compress, decompress
from hpbroker.records.errors import CorruptRecordError, InvalidCrcError, TruncatedRecordError

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


def needs_recompression(attributes: int, codec: int) -> bool:
    """Would ``recompress`` rebuild a batch with these attributes?"""
    return not attributes & layout.CONTROL_BIT and attributes & layout.COMPRESSION_MASK != codec


def recompress(batch, codec: int, level: int | None = None, *, verify_crc: bool = True):
    """The v2 batch at the start of ``batch`` with its records in ``codec``
    (a Kafka codec id) at a Kafka ``level`` of that codec.

    Returns ``batch`` itself when there is nothing to do (see the module
    docstring), else new bytes.  Raises CorruptRecordError when the batch is
    cut short, its CRC is wrong (unless ``verify_crc`` is off, for a caller
    that has just checked it), its records do not decompress, or they do not
    fill the records part exactly ``recordCount`` times.
    """
    header = read_header(batch)
    if header.size > len(batch):
        raise TruncatedRecordError(f"batch of {header.size} bytes, only {len(batch)} given")
    if not needs_recompression(header.attributes, codec):
        return batch
    view = memoryview(batch)[: header.size]
    if verify_crc:
        computed = compute_crc(view, 0, header.size)
        if computed != header.crc:
            raise InvalidCrcError(f"batch (base offset {header.base_offset}) has CRC {header.crc:#010x}, "
                                  f"computed {computed:#010x}", stored=header.crc, computed=computed)
    records = decompress(header.compression, view[layout.RECORDS:])
    _check_records(records, header)
    body = compress(codec, records, level)
    head = bytearray(view[: layout.BATCH_HEADER_SIZE])
    _INT32.pack_into(head, layout.BATCH_LENGTH, layout.BATCH_HEADER_SIZE + len(body) - layout.LOG_OVERHEAD)
    _INT16.pack_into(head, layout.ATTRIBUTES, (header.attributes & ~layout.COMPRESSION_MASK) | codec)
    _UINT32.pack_into(head, layout.CRC, crc32c(body, crc32c(head[layout.CRC_START :])))
    return b"".join((head, body))  # the one copy of the new records part


def recompress_batches(buf, positions, sizes, attributes, codec: int, level: int | None = None):
    """Every batch of ``buf`` (back to back, located by a batch scan whose CRC
    check passed) in ``codec``; None when none needs rebuilding, so the caller
    keeps its buffer (and its in-place stamping) untouched."""
    if not any(needs_recompression(a, codec) for a in attributes):
        return None
    view = memoryview(buf)
    parts = []
    for pos, size, attrs in zip(positions, sizes, attributes):
        piece = view[pos : pos + size]
        parts.append(recompress(piece, codec, level, verify_crc=False) if needs_recompression(attrs, codec) else piece)
    return bytearray().join(parts)  # writable: the log stamps offsets in place


def _check_records(records: bytes, header) -> None:
    """Kafka walks the records when it rebuilds a batch; so does this (one
    jitted pass), so a batch whose count or lengths lie is refused rather than
    sealed with a fresh CRC."""
    buf = np.frombuffer(records, np.uint8)
    decoded = decode_records(buf, [0], [len(records)], [header.base_offset], [header.base_timestamp],
                             [header.record_count])
    if decoded.error_batch >= 0:
        raise CorruptRecordError(
            f"{codec_name(header.compression)} batch (base offset {header.base_offset}): its "
            f"{len(records)} bytes of records are not {header.record_count} well-formed records")
