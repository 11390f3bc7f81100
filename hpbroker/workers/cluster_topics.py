"""The topics of a cluster, as ZooKeeper holds them: the same questions the
standalone ``TopicRegistry`` answers, read from the cluster image, and the
same changes, made as ZooKeeper writes in Kafka's layout (any broker may make
them, as Kafka's admin path did; the controller then elects leaders and the
replicas create their logs).

The image reaches this object through ``apply``; a change made here shows up
once ZooKeeper's watch brings it back, so ``changed`` lets a handler wait for
that (CreateTopics until its partitions have leaders, DeleteTopics until the
topic is gone).  The writes are coroutines (``cluster/admin.py``): a worker
waiting on ZooKeeper keeps serving its other connections.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from hpbroker.cluster import znodes
from hpbroker.cluster.admin import AdminError
from hpbroker.cluster.assignment import AssignmentError, assign_replicas, check_explicit
from hpbroker.cluster.image import ClusterImage
from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import OFFSETS_TOPIC, TRANSACTION_TOPIC
from hpbroker.storage import checkpoints
from hpbroker.storage.config import LogConfig
from hpbroker.workers.topics import (
    TopicError,
    TopicInfo,
    check_assignments,
    checked_overrides,
    collision,
    effective_config,
    validate_name,
)

log = logging.getLogger(__name__)


class ClusterTopics:
    def __init__(self, log_dirs: list[str], log_config: LogConfig, link, *, default_replication_factor: int,
                 offsets_replication_factor: int, transaction_replication_factor: int = 3,
                 transaction_min_isr: int = 2):
        self.log_dirs = log_dirs
        self.log_config = log_config
        self.link = link  # SharedLink: its ``admin`` makes the writes
        self.default_replication_factor = default_replication_factor
        self.offsets_replication_factor = offsets_replication_factor
        # transaction.state.log.replication.factor / .min.isr, for __transaction_state
        self.transaction_replication_factor = transaction_replication_factor
        self.transaction_min_isr = transaction_min_isr
        self.image = ClusterImage()
        self.generation = 0
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._effective: dict[str, tuple] = {}
        self._changed: asyncio.Event | None = None

    # --- the image ---------------------------------------------------------------------------
    def apply(self, image: ClusterImage) -> None:
        topics = {}
        for name, assignment in image.topics.items():
            if name in image.topics_being_deleted:
                continue
            topic_id = checkpoints.parse_kafka_uuid(assignment.topic_id) if assignment.topic_id else uuid.UUID(int=0)
            topics[name] = TopicInfo(name, topic_id, len(assignment.partitions),
                                     dict(image.topic_configs.get(name, {})))
        if topics != self._topics:
            self.generation += 1
            gone = self._topics.keys() - topics.keys()
            if gone:  # deleted, or being deleted; said, as a topic that vanished otherwise would be a fault
                log.info("no longer in the cluster image: %s", ", ".join(sorted(gone)))
        self.image = image
        self._topics = topics
        self._by_id = {info.topic_id: info for info in topics.values()}
        if self._changed is not None:
            self._changed.set()

    async def changed(self, timeout_s: float) -> None:
        """Until the next image (or the timeout)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    # --- reading (the standalone registry's questions) --------------------------------------------
    def refresh(self, force: bool = False, wait: bool = False) -> None:
        """The image is pushed by watches: nothing to read."""

    def get(self, name: str, partition: int = 0) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[TopicInfo]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def config_for(self, name: str) -> LogConfig:
        info = self._topics.get(name)
        return effective_config(self._effective, self.log_config, name, info.configs if info else {})

    @property
    def admin(self):
        """The ``ClusterAdmin`` making this broker's admin writes."""
        return self.link.admin

    # --- changing ---------------------------------------------------------------------------------
    async def create(self, name: str, partitions: int, configs: dict | None = None, *, validate_only: bool = False,
                     replication_factor: int = -1) -> TopicInfo:
        result = (await self.create_all([(name, partitions, configs, replication_factor, None)],
                                        validate_only=validate_only))[0]
        if isinstance(result, TopicError):
            raise result
        return result

    async def create_all(self, wanted: list, *, validate_only: bool = False) -> list:
        """[(name, partitions, configs[, replication factor, assignment])] ->
        [TopicInfo or TopicError], in order.  ``assignment`` (partition ->
        broker ids) overrides the count and the factor, as in CreateTopics.
        The topics are written concurrently."""
        async def one(request):
            name, partitions, configs = request[:3]
            factor = request[3] if len(request) > 3 else -1
            explicit = request[4] if len(request) > 4 else None
            try:
                return await self._create_one(name, partitions, configs, factor, explicit, validate_only)
            except TopicError as exc:
                return exc
        return list(await asyncio.gather(*(one(request) for request in wanted)))

    async def _create_one(self, name, partitions, configs, factor, explicit, validate_only) -> TopicInfo:
        validate_name(name)
        configs = checked_overrides(self.log_config, configs)
        if name in self.image.topics:
            state = "is marked for deletion" if name in self.image.topics_being_deleted else "already exists"
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} {state}")
        clash = collision(name, self.image.topics)
        if clash:
            raise TopicError(ErrorCode.invalid_topic_exception, f"topic {name!r} collides with existing topic "
                                                                f"{clash!r} ('.' and '_' collide in metric names)")
        brokers = {b.broker_id: b.rack for b in self.image.brokers.values()}
        if explicit:
            assignment = {p: list(replicas) for p, replicas in explicit.items()}
            try:
                check_explicit(assignment, set(brokers))
            except AssignmentError as exc:
                raise TopicError(ErrorCode.invalid_replica_assignment, str(exc)) from None
        else:
            if partitions < 1:
                raise TopicError(ErrorCode.invalid_partitions,
                                 f"number of partitions must be at least 1, got {partitions}")
            factor = self._replication_factor(name, factor, len(brokers))
            try:
                assignment = assign_replicas(brokers, partitions, factor)
            except AssignmentError as exc:
                raise TopicError(ErrorCode.invalid_replication_factor, str(exc)) from None
            if name == TRANSACTION_TOPIC:  # Kafka's: min.insync.replicas from the broker setting, within the factor
                configs = {**configs, "min.insync.replicas": str(max(1, min(self.transaction_min_isr, factor)))}
        topic_id = checkpoints.new_kafka_uuid()
        info = TopicInfo(name, topic_id, len(assignment), configs)
        if validate_only:
            return info
        try:
            await self.admin.create_topic(
                znodes.TopicAssignment(name, assignment, checkpoints.kafka_uuid_string(topic_id)), configs)
        except AdminError as exc:
            if exc.reason == "exists":
                raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists") from None
            raise TopicError(ErrorCode.request_timed_out, str(exc)) from None
        log.info("created topic %s: %d partitions, replicas %s", name, len(assignment), assignment)
        return info

    def _replication_factor(self, name: str, factor: int, live: int) -> int:
        if name in (OFFSETS_TOPIC, TRANSACTION_TOPIC):
            wanted, setting = ((self.offsets_replication_factor, "offsets.topic.replication.factor")
                               if name == OFFSETS_TOPIC else
                               (self.transaction_replication_factor, "transaction.state.log.replication.factor"))
            if wanted > live:
                log.warning("%s is %d but only %d broker(s) are live: creating %s with %d replica(s)", setting,
                            wanted, live, name, max(live, 1))
            return max(1, min(wanted, live))
        return self.default_replication_factor if factor == -1 else factor

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False,
                             assignments: list[list[int]] | None = None) -> TopicInfo:
        """Checked against the image, then written over the assignment ZooKeeper
        holds (a reassignment under way, say, is kept).  ``assignments``: the new
        partitions' replicas as the request gives them, else spread over the live
        brokers."""
        assignment = self.image.topics.get(name)
        if assignment is None or name in self.image.topics_being_deleted:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        self._grown(assignment, count, assignments)
        info = TopicInfo(name, self._topics[name].topic_id, count, self._topics[name].configs)
        if validate_only:
            return info
        try:
            await self.admin.update_topic(name, lambda current: self._grown(current, count, assignments))
        except AdminError as exc:
            if exc.reason == "missing":
                raise TopicError(ErrorCode.unknown_topic_or_partition, str(exc)) from None
            raise TopicError(ErrorCode.request_timed_out, str(exc)) from None
        return info

    def _grown(self, assignment: znodes.TopicAssignment, count: int,
               assignments: list[list[int]] | None = None) -> znodes.TopicAssignment:
        """``assignment`` with partitions added up to ``count``, as ``assignments``
        says or over the live brokers."""
        name, current = assignment.topic, len(assignment.partitions)
        if count <= current:
            raise TopicError(ErrorCode.invalid_partitions,
                             f"topic {name!r} has {current} partitions; the new count must be larger, got {count}")
        brokers = {b.broker_id: b.rack for b in self.image.brokers.values()}
        factor = len(znodes.target_replicas(assignment, 0)) if 0 in assignment.partitions else 1
        if assignments is not None:
            check_assignments(assignments, count - current, factor, set(brokers))
            added = {current + i: list(replicas) for i, replicas in enumerate(assignments)}
        else:
            try:
                added = assign_replicas(brokers, count - current, factor, first_partition=current)
            except AssignmentError as exc:
                raise TopicError(ErrorCode.invalid_replication_factor, str(exc)) from None
        return znodes.TopicAssignment(name, {**assignment.partitions, **added}, assignment.topic_id,
                                      assignment.adding_replicas, assignment.removing_replicas)

    async def set_configs(self, name: str, configs: dict, *, validate_only: bool = False) -> None:
        configs = checked_overrides(self.log_config, configs)
        if name not in self._topics:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if validate_only:
            return
        try:
            await self.admin.set_topic_config(name, configs)
        except AdminError as exc:
            raise TopicError(ErrorCode.request_timed_out, str(exc)) from None

    def changed_here(self) -> None:
        """Nothing to tell: every worker learns of topic changes from ZooKeeper."""

    async def delete(self, name: str) -> None:
        """Ask the controller to delete the topic; its replicas go when the image drops it."""
        try:
            await self.admin.delete_topic(name)
        except AdminError as exc:
            raise TopicError(ErrorCode.request_timed_out, str(exc)) from None
