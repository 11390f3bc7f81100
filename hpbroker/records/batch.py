"""Record batch v2 (magic 2): the unit Kafka writes to the log and the wire.

Layout (big-endian; offsets from ``hpbroker.kernels.layout``)::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field (size - 12)
    12 partitionLeaderEpoch  int32   } outside the CRC: a broker stamps them
    ..                                 } (and baseOffset) without recomputing it
    16 magic                 int8    = 2
    17 crc                   uint32  CRC-32C (Castagnoli) of bytes [21, end)
    21 attributes            int16   bits 0-2 codec, 3 timestamp type
                                     (1 = LogAppendTime), 4 transactional,
                                     5 control, 6 delete horizon set
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64   (the delete horizon when bit 6 is set)
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordCount           int32
    61 records               recordCount record bodies (see record.py); this
                             part alone is compressed when the codec is not 0

``recordCount`` stays outside the compressed part, so a scanner learns the
count without decompressing.  For a LogAppendTime batch the records' own
timestamps are ignored and ``maxTimestamp`` is every record's timestamp, as
Kafka's consumers read it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Sequence

from crc32c import crc32c

from hpbroker.kernels import layout
from hpbroker.records.compression import compress, decompress
from hpbroker.records.errors import CorruptRecordError, InvalidCrcError, TruncatedRecordError
from hpbroker.records.record import Record, decode_record, encode_record

MAGIC_V2 = 2
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

# One format for the whole header; its field offsets are pinned against
# ``layout`` by the tests, so the two declarations cannot drift apart.
_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == layout.BATCH_HEADER_SIZE
# The part of the header covered by the CRC: attributes .. recordCount.
_CRC_COVERED = struct.Struct(">hiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
_INT32_MAX = (1 << 31) - 1
# Smallest batchLength: the header fields after the length field, no records.
_MIN_BATCH_LENGTH = layout.BATCH_HEADER_SIZE - layout.LOG_OVERHEAD


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & layout.COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & layout.TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & layout.TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & layout.CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & layout.DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size(self) -> int:
        """Bytes of the whole batch, from baseOffset to the last record."""
        return self.batch_length + layout.LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return layout.NO_SEQUENCE
        # Sequences wrap at int32 max, as Kafka's DefaultRecordBatch does.
        return (self.base_sequence + self.last_offset_delta) & _INT32_MAX


@dataclass(frozen=True, slots=True)
class RecordBatch:
    header: BatchHeader
    records: tuple[Record, ...]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


# --- reading ------------------------------------------------------------------

def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; checks magic and batchLength only."""
    if pos < 0 or len(buf) - pos < layout.BATCH_HEADER_SIZE:
        raise TruncatedRecordError(
            f"batch header at byte {pos} needs {layout.BATCH_HEADER_SIZE} bytes, {max(0, len(buf) - pos)} remain")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"entry at byte {pos} has magic {header.magic}, not a v2 batch (legacy.decode_message_set reads 0 and 1)")
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at byte {pos} has batchLength {header.batch_length} < {_MIN_BATCH_LENGTH}")
    return header


_PRODUCER = struct.Struct(">qh")  # producer id and epoch, adjacent in the header


def first_is_transactional(buf) -> bool:
    """The first batch of ``buf`` is a v2 batch with the transactional bit: a
    byte test, cheap enough for every produce."""
    return (buf is not None and len(buf) > layout.ATTRIBUTES_LOW and buf[layout.MAGIC] == 2
            and bool(buf[layout.ATTRIBUTES_LOW] & layout.TRANSACTIONAL_BIT))


def first_producer(buf) -> tuple[int, int] | None:
    """(producer id, epoch) of the first batch of ``buf``; None when its header is cut short."""
    if len(buf) < layout.PRODUCER_ID + _PRODUCER.size:
        return None
    return _PRODUCER.unpack_from(buf, layout.PRODUCER_ID)


def compute_crc(buf, pos: int = 0, size: int | None = None) -> int:
    """CRC-32C of the batch at ``pos`` as Kafka computes it: bytes [21, end)."""
    if size is None:
        batch_length: int = _INT32.unpack_from(buf, pos + layout.BATCH_LENGTH)[0]
        size = batch_length + layout.LOG_OVERHEAD
    return crc32c(memoryview(buf)[pos + layout.CRC_START : pos + size])


def decode_batch(buf, pos: int = 0, *, verify_crc: bool = True) -> RecordBatch:
    """Decode the whole batch at ``pos``, decompressing its records."""
    header = read_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise TruncatedRecordError(f"batch at byte {pos} is {header.size} bytes, only {len(buf) - pos} remain")
    if verify_crc:
        computed = compute_crc(buf, pos, header.size)
        if computed != header.crc:
            raise InvalidCrcError(
                f"batch at byte {pos} (base offset {header.base_offset}) has CRC {header.crc:#010x}, "
                f"computed {computed:#010x}", stored=header.crc, computed=computed)
    if header.record_count < 0:
        raise CorruptRecordError(f"batch at byte {pos} has negative record count {header.record_count}")
    body = memoryview(buf)[pos + layout.RECORDS : end]
    if header.compression != layout.CODEC_NONE:
        body = decompress(header.compression, body)
    append_time = header.max_timestamp if header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME else None
    records = []
    p = 0
    try:
        for _ in range(header.record_count):
            record, p = decode_record(body, p, header.base_offset, header.base_timestamp, append_time)
            records.append(record)
    except TruncatedRecordError as exc:
        # The batch itself was whole, so a record running out of bytes means
        # recordCount or a length lies: corruption, not a torn tail.
        raise CorruptRecordError(f"batch at byte {pos}: {exc}") from exc
    if p != len(body):
        raise CorruptRecordError(
            f"batch at byte {pos} has {len(body) - p} bytes after its {header.record_count} records")
    return RecordBatch(header, tuple(records))


def iter_batches(buf, pos: int = 0, *, verify_crc: bool = True,
                 allow_partial_tail: bool = False) -> Iterator[RecordBatch]:
    """Decode back-to-back batches from ``pos`` to the end of ``buf``.

    A batch cut off at the end raises TruncatedRecordError, unless
    ``allow_partial_tail`` (a fetch response may end in a partial batch,
    which consumers skip).
    """
    end = len(buf)
    while pos < end:
        if allow_partial_tail:
            if end - pos < layout.BATCH_HEADER_SIZE:
                return
            size = _INT32.unpack_from(buf, pos + layout.BATCH_LENGTH)[0] + layout.LOG_OVERHEAD
            if pos + size > end:
                return
        batch = decode_batch(buf, pos, verify_crc=verify_crc)
        yield batch
        pos += batch.header.size


# --- writing ------------------------------------------------------------------

def encode_batch(records: Sequence[Record], *, base_offset: int = 0, compression: int = layout.CODEC_NONE,
                 timestamp_type: int = TIMESTAMP_CREATE_TIME, producer_id: int = layout.NO_PRODUCER_ID,
                 producer_epoch: int = layout.NO_PRODUCER_EPOCH, base_sequence: int = layout.NO_SEQUENCE,
                 transactional: bool = False, control: bool = False,
                 partition_leader_epoch: int = layout.NO_PARTITION_LEADER_EPOCH,
                 base_timestamp: int | None = None, delete_horizon_ms: int | None = None) -> bytes:
    """Encode records (absolute offsets and timestamps) as one v2 batch.

    Offset deltas are ``record.offset - base_offset`` (so they must be
    increasing and at least ``base_offset``); timestamp deltas are taken from
    ``base_timestamp``, by default the first record's timestamp as Kafka's
    producers do.  ``delete_horizon_ms`` sets the delete-horizon bit and stores
    the horizon as the base timestamp (KIP-534).
    """
    records = list(records)
    previous = base_offset - 1
    for record in records:
        if record.offset <= previous:
            raise ValueError(f"record offsets must increase from base offset {base_offset}: "
                             f"{record.offset} after {previous}")
        previous = record.offset
    last_offset_delta = (records[-1].offset - base_offset) if records else 0
    if last_offset_delta > _INT32_MAX:
        raise ValueError(f"offset delta {last_offset_delta} does not fit in int32")
    if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
        raise ValueError(f"timestamp type must be 0 or 1, not {timestamp_type}")
    if not 0 <= compression <= layout.COMPRESSION_MASK:
        raise ValueError(f"compression codec {compression} does not fit the attribute bits")

    attributes = compression
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= layout.TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= layout.TRANSACTIONAL_BIT
    if control:
        attributes |= layout.CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= layout.DELETE_HORIZON_BIT
        base_timestamp = delete_horizon_ms
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else layout.NO_TIMESTAMP
    max_timestamp = max((r.timestamp for r in records), default=layout.NO_TIMESTAMP)

    body = b"".join(encode_record(r, base_offset, base_timestamp) for r in records)
    if compression != layout.CODEC_NONE:
        body = compress(compression, body)
    try:
        covered = _CRC_COVERED.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                    producer_id, producer_epoch, base_sequence, len(records))
        crc = crc32c(body, crc32c(covered))
        batch_length = layout.BATCH_HEADER_SIZE - layout.LOG_OVERHEAD + len(body)
        prefix = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, MAGIC_V2, crc)
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from exc
    return b"".join((prefix, covered, body))


# --- stamping in place (a broker's append path) --------------------------------

def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset; outside the CRC, so the CRC stays valid."""
    _INT64.pack_into(buf, pos + layout.BASE_OFFSET, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch; outside the CRC, so the CRC stays valid."""
    _INT32.pack_into(buf, pos + layout.PARTITION_LEADER_EPOCH, epoch)


def set_log_append_time(buf, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp`` and recompute the CRC.

    As Kafka's broker does: the timestamp-type bit and maxTimestamp change,
    the records and baseTimestamp are left as the producer wrote them.
    """
    (attributes,) = _INT16.unpack_from(buf, pos + layout.ATTRIBUTES)
    _INT16.pack_into(buf, pos + layout.ATTRIBUTES, attributes | layout.TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + layout.MAX_TIMESTAMP, timestamp)
    _UINT32.pack_into(buf, pos + layout.CRC, compute_crc(buf, pos))
