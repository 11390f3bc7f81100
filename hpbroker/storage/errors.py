"""Storage errors, each carrying the Kafka error code a broker answers with."""

from hpbroker.errors import ErrorCode


class StorageError(Exception):
    error_code = ErrorCode.unknown_server_error


class OffsetOutOfRangeError(StorageError):
    error_code = ErrorCode.offset_out_of_range

    def __init__(self, offset: int, log_start: int, log_end: int):
        super().__init__(f"offset {offset} is outside the log's range [{log_start}, {log_end}]")
        self.offset, self.log_start, self.log_end = offset, log_start, log_end


class CorruptBatchError(StorageError):
    error_code = ErrorCode.corrupt_message


class RecordTooLargeError(StorageError):
    """A batch above ``max.message.bytes``."""

    error_code = ErrorCode.message_too_large


class RecordBatchTooLargeError(StorageError):
    """An append larger than a whole segment (``segment.bytes``): Kafka's
    RecordBatchTooLargeException, RECORD_LIST_TOO_LARGE."""

    error_code = ErrorCode.record_list_too_large


class InvalidRecordError(StorageError):
    error_code = ErrorCode.invalid_record


class UnsupportedFormatError(StorageError):
    error_code = ErrorCode.unsupported_for_message_format


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not follow its last sequence."""

    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(StorageError):
    """A batch from a producer epoch older than the partition has seen (a fenced producer)."""

    error_code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(StorageError):
    """A producer's data batch that does not fit its transaction here: a plain
    batch while its transaction is open on the partition."""

    error_code = ErrorCode.invalid_txn_state


class SourceChangedError(OSError):
    """What a write read changed under it: records in another worker's memory
    (the payload arena), rewritten by a successor of their sender.  An OSError,
    so the write is undone as one that failed on the disk is."""


class KafkaStorageError(StorageError):
    """The disk failed under a write (full, read-only, I/O error); nothing was appended."""

    error_code = ErrorCode.kafka_storage_error


class LogDirInUseError(StorageError):
    """Another process holds this log directory's lock."""
