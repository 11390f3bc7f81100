"""Every partition log of a broker, across its ``log.dirs``.

Opens every partition it owns with its recovery point and log start offset
(recovering them after a stop that was not clean), and writes the offset
checkpoints, which cover all partitions of a directory at once.  With
``manage_root`` (the directories are this process's alone, as in tests) it
also holds the directories themselves (``LogDirRoots``: lock,
``meta.properties``, the clean-shutdown marker): ``open()`` learns whether
the last stop was clean and ``close()`` flushes everything, writes the
checkpoints and only then the marker.  Without it (a worker) the acceptor
holds them and says whether the last stop was clean.

Compaction: ``cleanable_logs()`` lists the compacted logs worth a pass
(dirty ratio above ``min.cleanable.dirty.ratio``, ``max.compaction.lag.ms``
exceeded, or kept tombstones past their delete horizon), filthiest first, and
``clean_eligible()`` runs one pass over each and writes
``cleaner-offset-checkpoint``.  Threading contract: ``clean_eligible`` may run
in a thread of its own (``start_cleaner()``), beside the owner's appends,
reads and ``tick()``; a pass reads only inactive segments and takes a log's
lock only to swap segments.  Creating, deleting and closing logs stay with the
owner, which stops the cleaner first (``close()`` does).
"""

import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from hpbroker.clock import now_ms
from hpbroker.storage import checkpoints, cleaner, cleaner_plan, filenames
from hpbroker.storage.config import LogConfig
from hpbroker.storage.errors import StorageError
from hpbroker.storage.log import Log
from hpbroker.storage.log_dir_roots import LogDirRoots

log = logging.getLogger(__name__)

RETENTION_CHECK_INTERVAL_MS = 300_000  # log.retention.check.interval.ms
CHECKPOINT_INTERVAL_MS = 60_000  # log.flush.offset.checkpoint.interval.ms
HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 5_000  # replica.high.watermark.checkpoint.interval.ms
CHECKPOINT_LOCK_FILE = ".checkpoints.lock"  # serialises owners merging the shared checkpoint files


class LogManager:
    def __init__(
        self,
        log_dirs: list[str],
        config: LogConfig | None = None,
        *,
        broker_id: int = 0,
        cluster_id: str | None = None,
        config_for=None,
        retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS,
        checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS,
        owns=None,
        manage_root: bool = True,
        background_io: bool = False,
        replicated: bool = False,
    ):
        if not log_dirs:
            raise StorageError("log.dirs is empty")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.config = config or LogConfig()
        self.cluster_id = cluster_id
        # a topic's effective settings: the broker's defaults with its overrides
        # (the worker's TopicRegistry knows them; the default is no overrides)
        self._config_for = config_for or (lambda topic: self.config)
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self._last_retention_ms = self._last_checkpoint_ms = self._last_high_watermark_ms = now_ms()
        self.had_clean_shutdown = True
        self._owns = owns or (lambda topic, partition: True)
        # A broker's event loop must not wait on fsyncs nobody's answer waits
        # for: the checkpoints (rows taken on the caller's thread, files written
        # in order by this one), and the logs' roll and time flushes, segment
        # unlinks and deleted directories (``background_io``).
        self._background_io = (ThreadPoolExecutor(1, thread_name_prefix="storage-io") if background_io
                               else None)
        # Asked to fsync a log's group-committed writes soon (``Log.group_flush``):
        # the owner gathers its turn's writes into one fsync per log.  None: each
        # write's flush.messages fsync is done as it is written.
        self.group_flush: Callable[[Log], None] | None = None
        self.manage_root = manage_root
        self.root = LogDirRoots(log_dirs, broker_id=broker_id, cluster_id=cluster_id) if manage_root else None
        self._uncleanable: set[tuple[str, int]] = set()  # a pass failed on them (Kafka's uncleanable partitions)
        self._cleaner_thread: cleaner.CleanerThread | None = None
        # One of several replicas: a log's high watermark is what the leader
        # confirmed, restored from replication-offset-checkpoint, not its end.
        self.replicated = replicated

    # --- start and stop ------------------------------------------------------------
    def open(self, clean_shutdown: bool | None = None) -> "LogManager":
        """Open every owned partition; with ``manage_root`` lock the directories
        first and learn from them whether the last stop was clean, otherwise
        take ``clean_shutdown`` from whoever holds them."""
        if self.root is not None:
            clean = self.root.open()
            self.cluster_id = self.root.cluster_id
        else:
            clean = bool(clean_shutdown)
        self.had_clean_shutdown = clean
        for log_dir in self.log_dirs:
            self._load_dir(log_dir, clean)
        return self

    def _load_dir(self, log_dir: str, clean: bool) -> None:
        recovery_points = _read_checkpoint(os.path.join(log_dir, filenames.RECOVERY_POINT_CHECKPOINT))
        start_offsets = _read_checkpoint(os.path.join(log_dir, filenames.LOG_START_OFFSET_CHECKPOINT))
        cleaner_offsets = _read_checkpoint(os.path.join(log_dir, filenames.CLEANER_OFFSET_CHECKPOINT))
        high_watermarks = _read_checkpoint(os.path.join(log_dir, filenames.REPLICATION_OFFSET_CHECKPOINT))
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if name.endswith(filenames.DELETE_DIR_SUFFIX) and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)  # a DeleteTopics that a crash interrupted
                continue
            parsed = filenames.parse_partition_dir(name)
            if parsed is None or not os.path.isdir(path) or not self._owns(*parsed):
                continue
            if parsed in self._logs:
                raise StorageError(f"partition {name} is in two log dirs: {self._dir_of[parsed]} and {log_dir}")
            self._logs[parsed] = Log.open(
                path,
                *parsed,
                self._config_for(parsed[0]),
                recovery_point=recovery_points.get(parsed, 0),
                log_start_offset=start_offsets.get(parsed, 0),
                clean_shutdown=clean,
                cleaner_offset=cleaner_offsets.get(parsed),
            )
            self._attach(self._logs[parsed])
            if self.replicated:
                self._logs[parsed].high_watermark = max(high_watermarks.get(parsed, 0),
                                                        self._logs[parsed].log_start_offset)
            self._dir_of[parsed] = log_dir

    def close(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker."""
        self.stop_cleaner()
        if self._background_io is not None:
            self._background_io.shutdown(wait=True)  # earlier writes land before the final ones
            self._background_io = None
        for partition_log in self._logs.values():
            partition_log.close()
        self.write_checkpoints()
        self._logs.clear()
        if self.root is not None:
            self.root.close()

    # --- partitions ----------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> dict[tuple[str, int], Log]:
        return dict(self._logs)

    def get_or_create_log(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> Log:
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        name = filenames.partition_dir_name(topic, partition)
        # A directory made by whoever created the topic (maybe another process) is adopted.
        existing_dirs = [d for d in self.log_dirs if os.path.isdir(os.path.join(d, name))]
        log_dir = existing_dirs[0] if existing_dirs else min(
            self.log_dirs, key=lambda d: sum(1 for v in self._dir_of.values() if v == d))
        path = os.path.join(log_dir, name)
        created = Log.open(path, topic, partition, self._config_for(topic),
                           topic_id=topic_id or checkpoints.new_kafka_uuid())
        self._attach(created)
        if self.replicated:
            created.high_watermark = created.log_start_offset  # nothing confirmed yet
        self._logs[key], self._dir_of[key] = created, log_dir
        return created

    def _attach(self, partition_log: Log) -> None:
        partition_log.storage_io = self._background_io
        partition_log.group_flush = self._group_flush

    def _group_flush(self, partition_log: Log) -> None:
        if self.group_flush is not None:
            self.group_flush(partition_log)
        else:  # nobody gathers: at once
            partition_log.flush_owed()

    def release_log(self, topic: str, partition: int) -> tuple[int, int]:
        """Close a partition's log for another owner to open (``Log.release``):
        its recovery point and log start offset, which that owner opens it with."""
        released = self._logs[(topic, partition)]
        released.release()  # a failed fsync raises here, and the log stays open and this manager's
        del self._logs[(topic, partition)]
        self._dir_of.pop((topic, partition))
        self._uncleanable.discard((topic, partition))
        return released.flushed_offset, released.log_start_offset

    def adopt_log(self, topic: str, partition: int, recovery_point: int, log_start_offset: int) -> Log | None:
        """Open a partition's log that another owner released (``release_log``):
        as after a clean stop, so nothing is replayed; None when its directory
        is gone (the topic was deleted meanwhile)."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        name = filenames.partition_dir_name(topic, partition)
        log_dir = next((d for d in self.log_dirs if os.path.isdir(os.path.join(d, name))), None)
        if log_dir is None:
            return None
        adopted = Log.open(os.path.join(log_dir, name), topic, partition, self._config_for(topic),
                           recovery_point=recovery_point, log_start_offset=log_start_offset, clean_shutdown=True)
        self._attach(adopted)
        self._logs[key], self._dir_of[key] = adopted, log_dir
        return adopted

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition; a cleaning pass running over it gives up at its swap."""
        doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return False
        self._dir_of.pop((topic, partition))
        doomed.delete()
        return True

    def reconfigure(self) -> None:
        """Give every open log its effective settings again, after a topic's
        overrides or the broker's defaults changed (AlterConfigs, a reload)."""
        for (topic, _partition), partition_log in self._logs.items():
            wanted = self._config_for(topic)
            if partition_log.config != wanted:
                partition_log.config = wanted

    # --- periodic work ---------------------------------------------------------------
    def tick(self, now: int | None = None) -> None:
        """Flush policies and delayed deletes every call; retention and the
        checkpoints at their own intervals."""
        now = now_ms() if now is None else now
        for partition_log in self._logs.values():
            partition_log.tick(now)
        if now - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now
            self.apply_retention(now)
            for partition_log in self._logs.values():  # space reserved by appends that stopped
                partition_log.give_back_idle_space()
        if now - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now
            self.write_checkpoints()
        elif now - self._last_high_watermark_ms >= HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS:
            self._last_high_watermark_ms = now
            self.write_high_watermarks()

    def apply_retention(self, now: int | None = None) -> int:
        return sum(partition_log.delete_old_segments(now) for partition_log in self._logs.values())

    def write_checkpoints(self) -> None:
        """The recovery points (flushed offsets), log start offsets and cleaner
        offsets of every partition, one file of each per log dir."""
        for log_dir in self.log_dirs:
            mine = {k: v for k, v in self._logs.items() if self._dir_of[k] == log_dir}
            self._write_checkpoint(
                os.path.join(log_dir, filenames.RECOVERY_POINT_CHECKPOINT),
                {k: v.flushed_offset for k, v in mine.items()},
            )
            self._write_checkpoint(
                os.path.join(log_dir, filenames.LOG_START_OFFSET_CHECKPOINT),
                # Kafka lists only logs whose start is above their first segment's base.
                {k: v.log_start_offset for k, v in mine.items() if v.log_start_offset > v.segments[0].base_offset},
            )
        self.write_high_watermarks()
        self.write_cleaner_checkpoint()

    def write_high_watermarks(self) -> None:
        """``replication-offset-checkpoint``: each partition's high watermark (with
        one replica, the written offset), which a replica starts from after a
        restart and which readers of the directory, such
        as the Spark source, treat as the end of what consumers may see."""
        for log_dir in self.log_dirs:
            self._write_checkpoint(
                os.path.join(log_dir, filenames.REPLICATION_OFFSET_CHECKPOINT),
                {k: v.high_watermark for k, v in list(self._logs.items()) if self._dir_of.get(k) == log_dir},
            )

    def write_cleaner_checkpoint(self) -> None:
        """Each compacted log's first dirty offset, one file per log dir."""
        for log_dir in self.log_dirs:
            self._write_checkpoint(
                os.path.join(log_dir, filenames.CLEANER_OFFSET_CHECKPOINT),
                {k: v.cleaner_checkpoint for k, v in list(self._logs.items())
                 if self._dir_of.get(k) == log_dir and v.config.compact},
            )

    # --- compaction -------------------------------------------------------------------
    def cleanable_logs(self, now: int | None = None) -> list[tuple[tuple[str, int], Log, cleaner_plan.CleanablePlan]]:
        """The compacted logs worth cleaning now, filthiest first."""
        now = now_ms() if now is None else now
        found = []
        for key, partition_log in list(self._logs.items()):
            if key in self._uncleanable:
                continue
            plan = cleaner_plan.plan(partition_log, now)
            if plan is not None and plan.worth_cleaning(partition_log.config.min_cleanable_dirty_ratio):
                found.append((key, partition_log, plan))
        found.sort(key=lambda item: item[2].dirty_ratio, reverse=True)
        return found

    def clean_eligible(self, now: int | None = None, *, max_bytes: int | None = None) -> dict:
        """One pass over every log ``cleanable_logs`` names, then the cleaner
        checkpoint; returns ``{(topic, partition): CleanResult}``.  A log whose
        pass fails is logged and left alone from then on, as Kafka does."""
        now = now_ms() if now is None else now
        results = {}
        for key, partition_log, _ in self.cleanable_logs(now):
            try:
                results[key] = cleaner.clean_log(partition_log, now, max_bytes)
            except (StorageError, OSError) as exc:
                log.error("%s-%d: compaction failed, marking the partition uncleanable: %s", *key, exc)
                self._uncleanable.add(key)
        if any(r.end_offset >= 0 for r in results.values()):
            self.write_cleaner_checkpoint()
        return results

    def start_cleaner(self, backoff_ms: int | None = None) -> cleaner.CleanerThread:
        """Run ``clean_eligible`` in a background thread until ``stop_cleaner()``."""
        if self._cleaner_thread is None:
            self._cleaner_thread = cleaner.CleanerThread(self, backoff_ms)
            self._cleaner_thread.start()
        return self._cleaner_thread

    def stop_cleaner(self) -> None:
        thread, self._cleaner_thread = self._cleaner_thread, None
        if thread is not None:
            thread.stop()

    def _write_checkpoint(self, path: str, rows: dict) -> None:
        if self._background_io is None:
            self._merge_checkpoint(path, rows)
        else:
            self._background_io.submit(self._merge_checkpoint_logged, path, rows)

    def _merge_checkpoint_logged(self, path: str, rows: dict) -> None:
        try:
            self._merge_checkpoint(path, rows)
        except OSError as exc:  # the next interval tries again; recovery covers the gap
            log.error("writing %s failed: %s", path, exc)

    def _merge_checkpoint(self, path: str, rows: dict) -> None:
        """Replace this owner's rows (and drop partitions that no longer exist),
        keeping the rows other owners wrote; serialised by a lock file."""
        lock_fd = os.open(os.path.join(os.path.dirname(path), CHECKPOINT_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            merged = {} if self.manage_root else _read_checkpoint(path)
            log_dir = os.path.dirname(path)
            merged = {
                k: v for k, v in merged.items()
                if not self._owns(*k) and os.path.isdir(os.path.join(log_dir, filenames.partition_dir_name(*k)))
            }
            merged.update(rows)
            checkpoints.write_offset_checkpoint(path, merged)
        finally:
            os.close(lock_fd)


def _read_checkpoint(path: str) -> dict:
    try:
        return checkpoints.read_offset_checkpoint(path)
    except checkpoints.CheckpointError as exc:
        log.warning("ignoring a malformed checkpoint (every partition will be recovered): %s", exc)
        return {}
