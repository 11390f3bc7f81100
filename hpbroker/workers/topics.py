"""The topics of a standalone broker, read from the log directories themselves.

A topic exists when its partition directories do (``<topic>-<p>``, each with
``partition.metadata`` naming the topic id), which is also how Kafka's own
layout records it; per-topic config overrides live in one JSON file at the root
of the first log dir.  Every worker keeps a copy and rereads the directories
when one of them changed (a created or removed entry changes the directory's
mtime), so topics created through any worker are seen by all without messages.

Creating and removing topics is serialised across processes by a lock file;
the partition directories are created here, empty, and their owners open them
on first use.  A rescan takes the same lock shared, so a change in progress is
never seen half made (as Kafka publishes a CreateTopics request's topics, with
all their partitions, in one metadata batch): while a worker holds it, the
others keep answering from their last complete view.
"""

import contextlib
import fcntl
import json
import os
import re
import shutil
import uuid
import zlib
from dataclasses import dataclass, field

from hpbroker.errors import ErrorCode
from hpbroker.storage import checkpoints, filenames
from hpbroker.storage.config import ConfigError, LogConfig

CONFIGS_FILE = "hpbroker-topic-configs.json"
LOCK_FILE = ".hpbroker-topics.lock"
GENERATION_FILE = ".hpbroker-topics.generation"
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicError(Exception):
    """A topic operation that Kafka answers with an error code."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def checked_overrides(log_config: LogConfig, configs: dict | None) -> dict[str, str]:
    """A topic's overrides as text, or TopicError (INVALID_CONFIG) naming what is wrong."""
    configs = {k: str(v) for k, v in (configs or {}).items()}
    try:
        log_config.with_overrides(configs)
    except ConfigError as exc:
        raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    return configs


def effective_config(cache: dict, log_config: LogConfig, name: str, overrides: dict) -> LogConfig:
    """The broker's defaults with a topic's overrides, parsed once per
    (defaults, overrides) pair and kept in ``cache``: produce asks per partition."""
    cached = cache.get(name)
    if cached is None or cached[0] is not log_config or (cached[1] is not overrides and cached[1] != overrides):
        cached = (log_config, overrides, log_config.with_overrides(overrides))
        cache[name] = cached
    return cached[2]


def validate_name(name: str) -> None:
    if not name or name in (".", "..") or not _LEGAL_NAME.match(name):
        raise TopicError(ErrorCode.invalid_topic_exception,
                         f"topic name {name!r} is illegal: 1-249 characters of [a-zA-Z0-9._-], not . or ..")


class TopicRegistry:
    def __init__(self, log_dirs: list[str], log_config: LogConfig, broker_id: int = 0, changes=None):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        # shared.counters.TopicChanges under a broker: every worker bumps its own
        # counter after changing the topics on disk, so looking for changes is a
        # read of shared memory, not three stats and a file read per produced batch
        self.changes = changes
        self.broker_id = broker_id  # the one broker every replica assignment may name
        self.log_config = log_config
        self._effective: dict[str, tuple] = {}  # name -> (defaults, overrides, their LogConfig)
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._stamp = None
        self.generation = 0
        self.refresh(wait=True)

    # --- reading -------------------------------------------------------------
    def _current_stamp(self):
        if self.changes is not None:
            return self.changes.stamp()
        stamps = []
        for d in self.log_dirs:
            try:
                stamps.append(os.stat(d).st_mtime_ns)
            except FileNotFoundError:
                stamps.append(None)
        try:
            stamps.append(os.stat(self._configs_path).st_mtime_ns)
        except FileNotFoundError:
            stamps.append(None)
        # mtimes can be coarse (a jiffy on older kernels): every change made
        # under the lock also bumps this counter.
        stamps.append(self._read_generation())
        return tuple(stamps)

    @property
    def _generation_path(self) -> str:
        return os.path.join(self.log_dirs[0], GENERATION_FILE)

    def _read_generation(self) -> int:
        try:
            with open(self._generation_path, "rb") as f:
                return int(f.read() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    @property
    def _configs_path(self) -> str:
        return os.path.join(self.log_dirs[0], CONFIGS_FILE)

    def refresh(self, force: bool = False, wait: bool = False) -> None:
        """Reread the directories if they changed.  While another worker is
        creating or changing topics the last complete view stays (unless
        ``wait``); the next call looks again."""
        if self._current_stamp() == self._stamp and not force:
            return
        with self._shared(wait) as held:
            if held:
                self._rescan()

    @contextlib.contextmanager
    def _shared(self, wait: bool):
        try:
            fd = os.open(os.path.join(self.log_dirs[0], LOCK_FILE), os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:  # no log dir yet, or no lock file can be made (read-only, full): scan unlocked
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH if wait else fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _rescan(self) -> None:
        """Read every topic; the caller holds the lock (shared or exclusive)."""
        stamp = self._current_stamp()
        counts: dict[str, int] = {}
        dirs: dict[str, str] = {}
        for log_dir in self.log_dirs:
            try:
                names = os.listdir(log_dir)
            except FileNotFoundError:
                continue
            for name in names:
                parsed = filenames.parse_partition_dir(name)
                if parsed is None:
                    continue
                topic, partition = parsed
                counts[topic] = max(counts.get(topic, 0), partition + 1)
                dirs.setdefault(topic, os.path.join(log_dir, name))
        configs = self._read_configs()
        topics = {}
        for topic, count in counts.items():
            # Reread on every rescan: a topic deleted and created again under the
            # same name has a new id.
            topic_id = _read_topic_id(dirs[topic])
            if topic_id is None:
                # Written before partition.metadata existed (Kafka < 2.8): a stable stand-in.
                topic_id = uuid.uuid5(uuid.NAMESPACE_URL, "hpbroker-topic:" + topic)
            topics[topic] = TopicInfo(topic, topic_id, count, configs.get(topic, {}))
        self._topics = topics
        self._by_id = {t.topic_id: t for t in topics.values()}
        # Only now: a scan that failed (EMFILE, say) must be retried, not taken as current.
        self._stamp = stamp
        self.generation += 1  # lets owners notice changed topic configs

    def _read_configs(self) -> dict:
        try:
            with open(self._configs_path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}

    def get(self, name: str, partition: int = 0) -> TopicInfo | None:
        """The topic, rereading the directories first when it (or ``partition``)
        is not known yet: another worker may have just created it."""
        found = self._topics.get(name)
        if found is None or partition >= found.partitions:
            self._look_again()
            found = self._topics.get(name)
        return found

    def _look_again(self) -> None:
        """A name this worker does not know: rescan, waiting for a creation in
        progress in another worker to finish.  Neither the stamp (directory
        mtimes move in clock ticks of milliseconds) nor a scan skipped while
        the lock is taken may decide it: an acks=0 record for a topic
        auto-created a moment ago would be dropped without an answer."""
        self.refresh(force=True, wait=True)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        found = self._by_id.get(topic_id)
        if found is None:
            self._look_again()
            found = self._by_id.get(topic_id)
        return found

    def all(self) -> list[TopicInfo]:
        self.refresh()
        return sorted(self._topics.values(), key=lambda t: t.name)

    def config_for(self, name: str) -> LogConfig:
        """A topic's effective log settings, the one place they are computed:
        the broker's defaults with the topic's overrides, as last written by
        any worker."""
        self.refresh()
        info = self._topics.get(name)
        return effective_config(self._effective, self.log_config, name, info.configs if info else {})

    # --- changing ------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        os.makedirs(self.log_dirs[0], exist_ok=True)
        fd = os.open(os.path.join(self.log_dirs[0], LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._rescan()
            yield
            checkpoints.write_atomically(self._generation_path, f"{self._read_generation() + 1}\n")
            self.changed_here()
            self._rescan()  # before releasing: once another worker holds the lock, refresh() keeps the old view
        finally:
            os.close(fd)

    def changed_here(self) -> None:
        """This process changed the topics on disk (under the lock, or removing a
        deleted topic's partition): the other workers look again."""
        if self.changes is not None:
            self.changes.bump()

    # The changes are coroutines, as in a cluster (``ClusterTopics``), so that
    # handlers await either; here the work is done at once, under the lock.
    async def create(self, name: str, partitions: int, configs: dict | None = None, *,
                     validate_only: bool = False) -> TopicInfo:
        result = (await self.create_all([(name, partitions, configs)], validate_only=validate_only))[0]
        if isinstance(result, TopicError):
            raise result
        return result

    async def create_all(self, wanted: list, *, validate_only: bool = False) -> list:
        """[(name, partitions, configs)] -> [TopicInfo or TopicError], in order.  The
        topics of one request are made under one lock, so other workers see all of
        them or none (a consumer subscribed to several must not join with half)."""
        results: list = []
        checked = []
        for name, partitions, configs in wanted:
            try:
                validate_name(name)
                if partitions < 1:
                    raise TopicError(ErrorCode.invalid_partitions,
                                     f"number of partitions must be at least 1, got {partitions}")
                configs = checked_overrides(self.log_config, configs)
            except TopicError as exc:
                results.append(exc)
                continue
            results.append(None)
            checked.append((len(results) - 1, name, partitions, configs))
        if not checked:
            return results
        with self._locked():
            made: dict[str, TopicInfo] = {}
            for i, name, partitions, configs in checked:
                try:
                    if name in self._topics or name in made:
                        raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
                    clash = collision(name, {**self._topics, **made})
                    if clash:
                        raise TopicError(ErrorCode.invalid_topic_exception,
                                         f"topic {name!r} collides with existing topic {clash!r} "
                                         "('.' and '_' collide in metric names)")
                    info = TopicInfo(name, checkpoints.new_kafka_uuid(), partitions, configs)
                    if not validate_only:
                        if configs:
                            self._write_configs({**self._read_configs(), name: configs})
                        self._make_partition_dirs(info, range(partitions))
                    made[name] = results[i] = info
                except TopicError as exc:
                    results[i] = exc
                except OSError as exc:  # the configs file on a full disk: this topic fails, not the others
                    results[i] = TopicError(ErrorCode.kafka_storage_error, f"cannot create {name!r}: {exc.strerror}")
        # As read back from the directories (the lock's last rescan).
        return [self._topics.get(r.name, r) if isinstance(r, TopicInfo) else r for r in results]

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False,
                             assignments: list[list[int]] | None = None) -> TopicInfo:
        """More partitions; ``assignments``, when given, may name only this broker:
        a single broker holds one replica of each."""
        with self._locked():
            info = self._topics.get(name)
            if info is None:
                raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
            if count <= info.partitions:
                raise TopicError(ErrorCode.invalid_partitions,
                                 f"topic {name!r} has {info.partitions} partitions; "
                                 f"the new count must be larger, got {count}")
            if assignments is not None:
                check_assignments(assignments, count - info.partitions, 1, {self.broker_id})
            if not validate_only:
                self._make_partition_dirs(info, range(info.partitions, count))
        return self._topics[name]

    def forget_configs(self, name: str) -> None:
        with self._locked():
            configs = self._read_configs()
            if configs.pop(name, None) is not None:
                self._write_configs(configs)

    async def set_configs(self, name: str, configs: dict, *, validate_only: bool = False) -> None:
        """Replace a topic's overrides (an empty dict removes them all)."""
        configs = checked_overrides(self.log_config, configs)
        if validate_only:
            if name not in self._topics:
                raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
            return
        with self._locked():
            if name not in self._topics:
                raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
            self._write_configs({**self._read_configs(), name: configs})

    def _write_configs(self, configs: dict) -> None:
        checkpoints.write_atomically(self._configs_path, json.dumps(configs, indent=1, sort_keys=True) + "\n")

    def _make_partition_dirs(self, info: TopicInfo, partitions) -> None:
        """All of them or none: a topic with holes (a full disk halfway through)
        would send some keys to partitions that do not exist, for good."""
        made = []
        try:
            for partition in partitions:
                log_dir = self.log_dirs[(zlib.crc32(info.name.encode()) + partition) % len(self.log_dirs)]
                path = os.path.join(log_dir, filenames.partition_dir_name(info.name, partition))
                tmp = path + ".creating"
                shutil.rmtree(tmp, ignore_errors=True)
                os.makedirs(tmp)
                checkpoints.write_partition_metadata(os.path.join(tmp, filenames.PARTITION_METADATA), info.topic_id)
                os.rename(tmp, path)  # appears whole, metadata included
                made.append(path)
        except OSError as exc:
            for path in made + [tmp]:
                shutil.rmtree(path, ignore_errors=True)
            raise TopicError(ErrorCode.kafka_storage_error,
                             f"cannot create the partitions of {info.name!r} in "
                             f"{os.path.dirname(exc.filename or tmp)}: {exc.strerror}") from None


def _read_topic_id(partition_dir: str) -> uuid.UUID | None:
    path = os.path.join(partition_dir, filenames.PARTITION_METADATA)
    try:
        return checkpoints.read_partition_metadata(path)
    except (OSError, ValueError):
        return None


def check_assignments(assignments: list[list[int]], wanted: int, factor: int, brokers: set[int]) -> None:
    """CreatePartitions' own replica lists, as Kafka checks them: one per new
    partition, each of ``factor`` distinct registered brokers; else
    INVALID_REPLICA_ASSIGNMENT."""
    if len(assignments) != wanted:
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"{len(assignments)} replica lists for {wanted} new partitions")
    for replicas in assignments:
        if len(replicas) != factor or len(set(replicas)) != len(replicas):
            raise TopicError(ErrorCode.invalid_replica_assignment,
                             f"replicas {replicas}: expected {factor} distinct brokers, the topic's replication factor")
        unknown = sorted(set(replicas) - brokers)
        if unknown:
            raise TopicError(ErrorCode.invalid_replica_assignment, f"unknown broker(s) {unknown} in {replicas}")


def collision(name: str, topics) -> str | None:
    """The existing topic ``name`` would be confused with ('.' and '_' fold together in metric names)."""
    folded = name.replace(".", "_")
    for other in topics:
        if other != name and other.replace(".", "_") == folded:
            return other
    return None
