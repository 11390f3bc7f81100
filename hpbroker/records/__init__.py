"""Kafka's record formats, sans-io: bytes in, objects out, and back.

* ``batch``       record batch v2 (magic 2): encode, decode, in-place stamping
* ``record``      one record of a batch, and its headers
* ``legacy``      magic 0/1 message sets, nested compressed wrappers
* ``control``     transaction markers (control records)
* ``compression`` none/gzip/snappy/lz4/zstd
* ``recompress``  a v2 batch into another codec (a topic's ``compression.type``)
* ``varint``      zig-zag varints
* ``errors``      CorruptRecordError and its subclasses

Byte offsets come from ``hpbroker.kernels.layout``; nothing here opens a file
or a socket.
"""

from hpbroker.records import batch, compression, control, legacy, record, varint
from hpbroker.records.batch import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    RecordBatch,
    compute_crc,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from hpbroker.records.compression import compress, decompress
from hpbroker.records.control import ControlRecord, encode_control_batch, parse_control_record
from hpbroker.records.errors import CorruptRecordError, InvalidCrcError, TruncatedRecordError, UnknownCodecError
from hpbroker.records.legacy import LegacyRecord, decode_message_set, encode_message_set
from hpbroker.records.record import Header, Record

__all__ = [
    "BatchHeader", "ControlRecord", "CorruptRecordError", "Header", "InvalidCrcError", "LegacyRecord",
    "Record", "RecordBatch", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TruncatedRecordError",
    "UnknownCodecError", "batch", "compress", "compute_crc", "compression", "control", "decode_batch",
    "decode_message_set", "decompress", "encode_batch", "encode_control_batch", "encode_message_set",
    "iter_batches", "legacy", "parse_control_record", "read_header", "record", "set_base_offset",
    "set_log_append_time", "set_partition_leader_epoch", "varint",
]
