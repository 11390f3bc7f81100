"""Every file and directory name of Kafka's log layout, in one place.

    <log.dir>/
        meta.properties, .lock, .kafka_cleanshutdown
        recovery-point-offset-checkpoint, log-start-offset-checkpoint,
        replication-offset-checkpoint, cleaner-offset-checkpoint
        <topic>-<partition>/
            00000000000000000000.log / .index / .timeindex / .txnindex / .snapshot
            leader-epoch-checkpoint, partition.metadata

A segment file is named by its base offset as 20 zero-padded digits.  Transient
suffixes are appended to a whole name: ``.deleted`` while a segment waits for
its asynchronous delete, ``.cleaned`` and ``.swap`` while the cleaner swaps one.
A partition directory being deleted is renamed ``<topic>-<p>.<uuid>-delete``.
"""

import os
import re
import uuid

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
TRANSIENT_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)

META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

_OFFSET_DIGITS = 20
# Kafka's legal topic names: 1..249 characters of [a-zA-Z0-9._-].
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PARTITION_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def offset_prefix(offset: int) -> str:
    return f"{offset:0{_OFFSET_DIGITS}d}"


def segment_file(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, offset_prefix(base_offset) + suffix)


def base_offset_of(filename: str) -> int:
    """The base offset a segment file is named after (any suffixes ignored)."""
    name = os.path.basename(filename)
    digits = name.split(".", 1)[0]
    if len(digits) != _OFFSET_DIGITS or not digits.isdigit():
        raise ValueError(f"not a segment file name: {name!r}")
    return int(digits)


def is_segment_log(filename: str) -> bool:
    name = os.path.basename(filename)
    return name.endswith(LOG_SUFFIX) and _is_offset_name(name[: -len(LOG_SUFFIX)])


def _is_offset_name(stem: str) -> bool:
    return len(stem) == _OFFSET_DIGITS and stem.isdigit()


def validate_topic(topic: str) -> None:
    if topic in (".", "..") or not _TOPIC_RE.match(topic):
        raise ValueError(
            f"illegal topic name {topic!r}: 1-249 characters of ASCII letters, digits, '.', '_' and '-'"
        )


def partition_dir_name(topic: str, partition: int) -> str:
    validate_topic(topic)
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a partition directory name, None for anything else."""
    if name.endswith(DELETE_DIR_SUFFIX) or name.startswith("."):
        return None
    match = _PARTITION_DIR_RE.match(name)
    if not match or not _TOPIC_RE.match(match["topic"]):
        return None
    return match["topic"], int(match["partition"])


def delete_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
