"""Partitioned, segmented logs in Apache Kafka's own on-disk layout."""

from hpbroker.storage.config import ConfigError, LogConfig
from hpbroker.storage.errors import (
    CorruptBatchError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogDirInUseError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnsupportedFormatError,
)
from hpbroker.storage.log import AppendInfo, Log, ReadSlice
from hpbroker.storage.log_manager import LogManager

__all__ = [
    "AppendInfo",
    "ConfigError",
    "CorruptBatchError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "InvalidRecordError",
    "KafkaStorageError",
    "Log",
    "LogConfig",
    "LogDirInUseError",
    "LogManager",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ReadSlice",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "UnsupportedFormatError",
]
