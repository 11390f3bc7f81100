"""Storage errors, each carrying the Kafka error code a broker answers with."""


class StorageError(Exception):
    error_code = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StorageError):
    error_code = 1  # OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start: int, log_end: int):
        super().__init__(f"offset {offset} is outside the log's range [{log_start}, {log_end}]")
        self.offset, self.log_start, self.log_end = offset, log_start, log_end


class CorruptBatchError(StorageError):
    error_code = 2  # CORRUPT_MESSAGE


class RecordTooLargeError(StorageError):
    error_code = 10  # MESSAGE_TOO_LARGE


class InvalidRecordError(StorageError):
    error_code = 87  # INVALID_RECORD


class UnsupportedFormatError(StorageError):
    error_code = 43  # UNSUPPORTED_FOR_MESSAGE_FORMAT


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not follow its last sequence."""

    error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """A batch from a producer epoch older than the partition has seen (a fenced producer)."""

    error_code = 47  # INVALID_PRODUCER_EPOCH


class KafkaStorageError(StorageError):
    """The disk failed under a write (full, read-only, I/O error); nothing was appended."""

    error_code = 56  # KAFKA_STORAGE_ERROR


class LogDirInUseError(StorageError):
    """Another process holds this log directory's lock."""
