"""Partitioned, segmented logs in Apache Kafka's own on-disk layout."""

from hpbroker.storage.config import ConfigError, LogConfig
from hpbroker.storage.errors import (
    CorruptBatchError,
    InvalidRecordError,
    KafkaStorageError,
    LogDirInUseError,
    OffsetOutOfRangeError,
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
    "InvalidRecordError",
    "KafkaStorageError",
    "Log",
    "LogConfig",
    "LogDirInUseError",
    "LogManager",
    "OffsetOutOfRangeError",
    "ReadSlice",
    "RecordTooLargeError",
    "StorageError",
    "UnsupportedFormatError",
]
