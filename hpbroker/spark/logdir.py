"""Finding partitions, segments and checkpoints in Kafka log directories, read-only.

A log directory holds ``<topic>-<partition>/`` directories of segments named by
base offset (``%020d.log``, ``.index``, ``.timeindex``, ``.txnindex``) and, at
its root, text checkpoints (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``).  Names and
the checkpoint format come from ``hpbroker.storage.filenames`` /
``checkpoints``; nothing here takes the directory lock or writes anything, so
Spark executors can read a directory a live broker (or Apache Kafka) owns.

Segment ``i`` holds offsets ``[base_i, base_{i+1})``; the last one is the
active segment, the only one whose tail can be torn or still growing.
Transient names (``.deleted``, ``.cleaned``, ``.swap``) are not segments.
"""

import glob
import os
import re
from dataclasses import dataclass

from hpbroker.storage import checkpoints, filenames


@dataclass(frozen=True)
class PartitionDir:
    log_dir: str
    topic: str
    partition: int

    @property
    def path(self) -> str:
        return os.path.join(self.log_dir, f"{self.topic}-{self.partition}")

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition


def log_dirs_of(path: str) -> list[str]:
    """A comma-separated list of log directories (a broker's ``log.dirs``),
    each of which may be a glob (``/shared/broker-*/data``: every broker of a
    cluster on shared storage)."""
    dirs = []
    for entry in (p.strip() for p in path.split(",")):
        if not entry:
            continue
        if glob.has_magic(entry):
            matched = sorted(d for d in glob.glob(entry) if os.path.isdir(d))
            if not matched:
                raise FileNotFoundError(f"hpbroker source: no log directory matches {entry!r}")
            dirs += matched
        elif os.path.isdir(entry):
            dirs.append(entry)
        else:
            raise FileNotFoundError(f"hpbroker source: log directory {entry!r} does not exist")
    return list(dict.fromkeys(dirs))


def find_partitions(log_dirs: list[str], topics: list[str] | None = None,
                    pattern: str | None = None) -> list[PartitionDir]:
    """Partition directories of the named topics, or of the topics matching ``pattern`` (whole name)."""
    regex = re.compile(pattern) if pattern is not None else None
    found = []
    for log_dir in log_dirs:
        for name in os.listdir(log_dir):
            parsed = filenames.parse_partition_dir(name)
            if parsed is None or not os.path.isdir(os.path.join(log_dir, name)):
                continue
            topic, partition = parsed
            if topics is not None and topic not in topics:
                continue
            if regex is not None and not regex.fullmatch(topic):
                continue
            found.append(PartitionDir(log_dir, topic, partition))
    return sorted(found, key=lambda p: p.key)


def segment_bases(partition_path: str) -> list[int]:
    """Base offsets of the partition's segments, ascending."""
    try:
        names = os.listdir(partition_path)
    except FileNotFoundError:
        return []
    return sorted(filenames.base_offset_of(n) for n in names if filenames.is_segment_log(n))


def segment_path(partition_path: str, base: int, suffix: str = filenames.LOG_SUFFIX) -> str:
    return filenames.segment_file(partition_path, base, suffix)


@dataclass(frozen=True)
class Checkpoints:
    """The broker's offset checkpoints of one log directory; a missing file or entry is None."""

    recovery_point: dict
    log_start: dict
    high_watermark: dict

    @classmethod
    def read(cls, log_dir: str) -> "Checkpoints":
        def load(name):
            return checkpoints.read_offset_checkpoint(os.path.join(log_dir, name))
        return cls(load(filenames.RECOVERY_POINT_CHECKPOINT), load(filenames.LOG_START_OFFSET_CHECKPOINT),
                   load(filenames.REPLICATION_OFFSET_CHECKPOINT))

    def read_limit(self, key) -> int | None:
        """Offset a reader must not pass: the high watermark, what consumers of a
        live broker may see; without one (an older layout), the recovery point."""
        if key in self.high_watermark:
            return self.high_watermark[key]
        return self.recovery_point.get(key)


def choose_replicas(found: list[PartitionDir], checkpoints_of: dict) -> list[PartitionDir]:
    """One directory per partition.  The log dirs of several brokers hold a
    replica each of a replicated partition; all agree below their high
    watermarks, so the one with the highest checkpointed high watermark gives
    the most (and is read no further than it).  Ties go to the first dir
    named."""
    order = {d: i for i, d in enumerate(checkpoints_of)}
    best: dict[tuple[str, int], tuple[int, int, PartitionDir]] = {}
    for pdir in found:
        ck = checkpoints_of.get(pdir.log_dir)
        limit = ck.read_limit(pdir.key) if ck is not None else None
        rank = (-1 if limit is None else limit, -order.get(pdir.log_dir, 0))
        if pdir.key not in best or rank > best[pdir.key][:2]:
            best[pdir.key] = (*rank, pdir)
    return sorted((entry[2] for entry in best.values()), key=lambda p: p.key)
