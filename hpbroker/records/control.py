"""Control records: the transaction markers a coordinator writes.

A control batch has the control and transactional attribute bits set and
holds one record whose key and value are::

    key    version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)
    value  version int16 (0), coordinatorEpoch int32

Readers tolerate higher versions by reading these leading fields and ignoring
what follows, as Kafka does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hpbroker.clock import now_ms
from hpbroker.kernels import layout
from hpbroker.records.batch import decode_batch, encode_batch
from hpbroker.records.errors import CorruptRecordError
from hpbroker.records.record import Record

ABORT = layout.CONTROL_TYPE_ABORT
COMMIT = layout.CONTROL_TYPE_COMMIT
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KIND_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT"}

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ControlRecord:
    kind: int  # ABORT or COMMIT (other values: a type this reader does not know)
    version: int
    coordinator_epoch: int  # -1 when the record carries no end-transaction marker

    @property
    def kind_name(self) -> str:
        return _KIND_NAMES.get(self.kind, "UNKNOWN")

    @property
    def is_commit(self) -> bool:
        return self.kind == COMMIT

    @property
    def is_abort(self) -> bool:
        return self.kind == ABORT


def parse_control_record(record: Record) -> ControlRecord:
    """Read the marker of a record from a control batch."""
    if record.key is None or len(record.key) < _KEY.size:
        raise CorruptRecordError(f"control record at offset {record.offset} has a key shorter than 4 bytes")
    version, kind = _KEY.unpack_from(record.key)
    if kind not in _KIND_NAMES:
        return ControlRecord(kind, version, -1)
    if record.value is None or len(record.value) < _VALUE.size:
        raise CorruptRecordError(
            f"{_KIND_NAMES[kind]} marker at offset {record.offset} has a value shorter than 6 bytes")
    _, coordinator_epoch = _VALUE.unpack_from(record.value)
    return ControlRecord(kind, version, coordinator_epoch)


def marker_at(buf, pos: int) -> ControlRecord:
    """The marker of the control batch at ``pos`` of ``buf`` (CorruptRecordError if it holds none)."""
    records = decode_batch(buf, pos, verify_crc=False).records
    if not records:
        raise CorruptRecordError(f"control batch at byte {pos} holds no record")
    return parse_control_record(records[0])


def encode_control_record(kind: int, coordinator_epoch: int, *, offset: int = 0, timestamp: int = 0) -> Record:
    if kind not in _KIND_NAMES:
        raise ValueError(f"control record type must be ABORT (0) or COMMIT (1), not {kind}")
    return Record(offset, timestamp, _KEY.pack(CONTROL_KEY_VERSION, kind),
                  _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch))


def encode_control_batch(kind: int, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         base_offset: int = 0, timestamp: int | None = None,
                         partition_leader_epoch: int = layout.NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transactional control batch holding one ABORT or COMMIT marker.

    ``timestamp`` defaults to the current time in milliseconds, as the
    coordinator stamps its markers.
    """
    if timestamp is None:
        timestamp = now_ms()
    record = encode_control_record(kind, coordinator_epoch, offset=base_offset, timestamp=timestamp)
    return encode_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                        transactional=True, control=True, partition_leader_epoch=partition_leader_epoch)
