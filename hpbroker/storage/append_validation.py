"""What an append must satisfy before the log takes it (Kafka's LogValidator).

Each check raises a StorageError subclass carrying the Kafka error code, its
message prefixed with the partition's name; the log appends nothing then.
"""

import numpy as np

from hpbroker.kernels.batch_scan import STOP_END
from hpbroker.kernels.layout import CONTROL_BIT
from hpbroker.records.batch_columns import data_batches
from hpbroker.storage import record_columns
from hpbroker.storage.config import LogConfig
from hpbroker.storage.errors import (
    CorruptBatchError,
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedFormatError,
)


def validate(scan, size: int, config: LogConfig, name: str, *, from_client: bool) -> bool:
    """Raise for a request that may not be appended; return whether any
    batch carries a producer id (needs the producer-state check)."""
    if scan.stop != STOP_END or len(scan.position) == 0:
        raise CorruptBatchError(
            f"{name}: rejected append: batch at byte {scan.valid_end} of {size} is invalid (scan stop code {scan.stop})"
        )
    # Python lists, not numpy reductions: a request holds a batch or a few, and
    # a reduction over a short array costs more than the loop.
    if any(magic != 2 for magic in scan.magic.tolist()):
        raise UnsupportedFormatError(f"{name}: only record batch v2 (magic 2) can be appended")
    check_sizes(scan, size, config, name)
    counts = scan.record_count.tolist()
    if any(last - base + 1 != count or count < 1
           for base, last, count in zip(scan.base_offset.tolist(), scan.last_offset.tolist(), counts)):
        raise InvalidRecordError(f"{name}: a batch's record count does not match its last offset delta")
    producer_ids = scan.producer_id.tolist()
    idempotent = max(producer_ids) >= 0
    if from_client:  # as Kafka's LogValidator: markers carry a producer id but no sequence
        if any(attributes & CONTROL_BIT for attributes in scan.attributes.tolist()):
            raise InvalidRecordError(f"{name}: clients may not append control batches")
        if idempotent and any(p >= 0 and s < 0 for p, s in zip(producer_ids, scan.base_sequence.tolist())):
            raise InvalidRecordError(f"{name}: a batch with a producer id has no base sequence")
    return idempotent


def check_sizes(scan, size: int, config: LogConfig, name: str) -> None:
    largest = max(scan.size.tolist(), default=0)
    if largest > config.max_message_bytes:
        first = next(s for s in scan.size.tolist() if s > config.max_message_bytes)
        raise RecordTooLargeError(
            f"{name}: batch of {first} bytes exceeds max.message.bytes={config.max_message_bytes}"
        )
    if size > config.segment_bytes:
        raise RecordBatchTooLargeError(f"{name}: {size} bytes exceed segment.bytes={config.segment_bytes}")


def check_keys(buf, scan, name: str) -> None:
    """Kafka's rule for compacted topics: every data record needs a key (the
    batches are already known to be v2)."""
    data = data_batches(scan)
    if not len(data):
        return
    view = np.frombuffer(buf, np.uint8)
    for records in record_columns.decode(view, scan, data):
        if (records.columns.key_length < 0).any():
            raise InvalidRecordError(f"{name}: compacted topic cannot accept a record without a key")
