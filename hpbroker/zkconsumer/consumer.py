"""A consumer whose group coordinates itself through ZooKeeper, as Kafka's
ZooKeeper consumers did before broker-side groups: each member registers under
``/consumers/<group>/ids``, watches its group, the live brokers and (for a
pattern) the topics, and on any change runs the range assignment over the
same ZooKeeper view as every other member, releasing what it owned before
claiming its new share.

Threads: kazoo's watch callbacks only take note that a rebalance is wanted;
a rebalancer thread of this consumer carries it out, whether or not the
application is polling; ``poll`` fetches in the caller's thread.  One lock
keeps a rebalance and a fetch apart, so a released partition is never read
after its release, and positions are committed before ownership changes.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import uuid
from typing import Iterator

from hpbroker.clock import now_ms
from hpbroker.cluster import session, znodes
from hpbroker.cluster.consumer_registry import ConsumerRegistry
from hpbroker.sentinels import EARLIEST, LATEST
from hpbroker.zkconsumer.broker_client import BrokerConnections
from hpbroker.zkconsumer.offset_storage import DualOffsets, KafkaOffsets, OffsetStorageError, ZooKeeperOffsets
from hpbroker.zkconsumer.partition_fetcher import Message, PartitionFetcher
from hpbroker.zkconsumer.range_assignment import range_assign

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_RESETS = {"smallest": EARLIEST, "earliest": EARLIEST, "largest": LATEST, "latest": LATEST}
_STORAGES = ("zookeeper", "kafka")
STREAMS = 1  # each consumer reads its share as one stream


class RebalanceFailed(Exception):
    """Another member kept a partition this one was given, through every retry."""


class ZookeeperConsumer:
    def __init__(self, zookeeper: str, group_id: str, topics: list[str] | None = None, *,
                 pattern: str | None = None, consumer_id: str | None = None, offsets_storage: str = "zookeeper",
                 dual_commit: bool = False, auto_commit: bool = True, auto_commit_interval_ms: int = 60000,
                 auto_offset_reset: str = "largest", rebalance_max_retries: int = 4,
                 rebalance_backoff_ms: int = 2000, zookeeper_session_timeout_ms: int = 6000,
                 zookeeper_connection_timeout_ms: int = 6000, fetch_wait_max_ms: int = 100,
                 fetch_message_max_bytes: int = 1 << 20, socket_timeout_ms: int = 30000):
        if (topics is None) == (pattern is None):
            raise ValueError("give either topics or pattern")
        if topics is not None and (isinstance(topics, str) or not topics):
            raise ValueError("topics must be a non-empty list of topic names")
        if offsets_storage not in _STORAGES:
            raise ValueError(f"offsets_storage must be one of {', '.join(_STORAGES)}, not {offsets_storage!r}")
        if auto_offset_reset not in _RESETS:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(_RESETS)}, not {auto_offset_reset!r}")
        self.group_id = group_id
        self.topics = sorted(set(topics)) if topics is not None else None
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.consumer_id = consumer_id or f"{socket.gethostname()}-{uuid.uuid4()}"
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff_s = rebalance_backoff_ms / 1000
        self.rebalances = 0  # completed rebalances, for operators and tests

        self._lock = threading.RLock()
        self._wanted = threading.Event()  # a rebalance is due
        self._assigned = threading.Condition(self._lock)
        self._closed = False
        self._session_lost = False
        self._owned: set[TopicPartition] = set()
        self._committed: dict[TopicPartition, int] = {}
        self._next_commit = time.monotonic() + self.auto_commit_interval_s

        self._zk = session.connect(zookeeper, zookeeper_session_timeout_ms, zookeeper_connection_timeout_ms)
        try:
            self.registry = ConsumerRegistry(self._zk, group_id)
            self._connections = BrokerConnections(self.consumer_id, socket_timeout_ms / 1000)
            self._offsets = self._offset_storage(offsets_storage, dual_commit, socket_timeout_ms / 1000)
            self._fetcher = PartitionFetcher(self.registry, self._connections, _RESETS[auto_offset_reset],
                                             fetch_wait_max_ms, fetch_message_max_bytes)
            self.registry.register(self.consumer_id, self._registration())
            self.registry.on_session(self._on_session_lost, self._on_connected)
            self.registry.watch(self._rebalance_wanted, topics_too=self.pattern is not None)
            try:
                self._rebalance_with_retries()  # the first share, before the constructor returns
            except RebalanceFailed as exc:
                log.warning("%s; the rebalancer thread keeps trying", exc)
                self._wanted.set()
        except BaseException:
            self._connections_close_quietly()
            session.close(self._zk)
            raise
        self._rebalancer = threading.Thread(target=self._rebalance_loop, name=f"rebalance-{group_id}", daemon=True)
        self._rebalancer.start()

    def _offset_storage(self, storage: str, dual_commit: bool, timeout_s: float):
        zookeeper = ZooKeeperOffsets(self.registry)
        kafka = KafkaOffsets(self.group_id, self.registry, self._connections, timeout_s)
        if dual_commit:
            return DualOffsets(zookeeper, kafka)
        return kafka if storage == "kafka" else zookeeper

    def _registration(self) -> znodes.ConsumerRegistration:
        if self.pattern is not None:
            return znodes.ConsumerRegistration({self.pattern.pattern: STREAMS}, znodes.PATTERN_WHITE_LIST, now_ms())
        assert self.topics is not None  # a pattern, or topics
        return znodes.ConsumerRegistration({t: STREAMS for t in self.topics}, znodes.PATTERN_STATIC, now_ms())

    # --- what the application calls --------------------------------------------------------
    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._owned)

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[Message]:
        """The next records of the owned partitions (at most ``max_records``),
        waiting up to ``timeout_s`` for some; [] when none came.  Their offsets
        count as consumed (and are committed by the next commit)."""
        if max_records is not None and max_records < 1:
            raise ValueError("max_records must be at least 1")
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the consumer is closed")
                self._maybe_auto_commit()
                remaining = deadline - time.monotonic()
                if self._owned and not self._session_lost:
                    messages = self._fetcher.fetch(max(0.0, remaining))
                    if max_records is not None and len(messages) > max_records:
                        self._fetcher.unread(messages[max_records:])
                        messages = messages[:max_records]
                    if messages:
                        return messages
                elif remaining > 0:
                    self._assigned.wait(min(remaining, 0.5))
            if time.monotonic() >= deadline:
                return []

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            yield from self.poll(1.0)

    def at_end(self) -> bool:
        """Every owned partition has been read to its high watermark (False while nothing is owned)."""
        with self._lock:
            return bool(self._owned) and self._fetcher.at_end()

    def commit(self) -> None:
        """Store the position of every owned partition (the next offset to read)."""
        with self._lock:
            self._commit()

    def close(self) -> None:
        """Commit (with auto commit), give up the partitions and leave the group
        at once, so the others rebalance without waiting out a session."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._assigned.notify_all()
            try:
                if self.auto_commit:
                    self._commit()
                self._release_all()
                self.registry.unregister(self.consumer_id)
            except Exception as exc:  # the session may be gone: its ephemeral nodes go with it
                log.warning("group %s: leaving cleanly failed: %s", self.group_id, exc)
        self._wanted.set()
        if threading.current_thread() is not self._rebalancer:
            self._rebalancer.join(10)
        self._connections_close_quietly()
        session.close(self._zk)

    def __enter__(self) -> "ZookeeperConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- offsets ------------------------------------------------------------------------------
    def _maybe_auto_commit(self) -> None:
        if self.auto_commit and time.monotonic() >= self._next_commit:
            try:
                self._commit()
            except OffsetStorageError as exc:
                log.warning("group %s: auto commit failed: %s", self.group_id, exc)

    def _commit(self) -> None:
        self._next_commit = time.monotonic() + self.auto_commit_interval_s
        if self._session_lost:
            return  # the partitions may be someone else's by now
        positions = {tp: offset for tp, offset in self._fetcher.positions.items()
                     if offset is not None and self._committed.get(tp) != offset}
        if positions:
            self._offsets.commit(positions)
            self._committed.update(positions)

    # --- rebalancing ----------------------------------------------------------------------------
    def _rebalance_wanted(self, reason: str) -> None:
        log.info("group %s: %s; rebalancing %s", self.group_id, reason, self.consumer_id)
        self._wanted.set()

    def _on_session_lost(self) -> None:
        # every ephemeral node of ours is gone: another member may claim our
        # partitions at any moment, so stop reading them (the flag is read
        # under the lock by poll) and rebalance once connected again
        self._session_lost = True
        self._wanted.set()

    def _on_connected(self) -> None:
        if self._session_lost:
            self._wanted.set()

    def _rebalance_loop(self) -> None:
        while True:
            self._wanted.wait()
            if self._closed:
                return
            self._wanted.clear()
            try:
                self._rebalance_with_retries()
            except RebalanceFailed as exc:
                log.warning("%s; trying again", exc)
                self._wanted.set()
            except Exception as exc:  # ZooKeeper unreachable, a coordinator gone: try again
                log.warning("group %s: rebalancing %s failed: %r; trying again in %g s", self.group_id,
                            self.consumer_id, exc, self.rebalance_backoff_s)
                time.sleep(self.rebalance_backoff_s)
                self._wanted.set()

    def _rebalance_with_retries(self) -> None:
        for attempt in range(1, self.rebalance_max_retries + 1):
            with self._lock:
                if self._closed:
                    return
                if self._rebalance_once():
                    self.rebalances += 1
                    self._assigned.notify_all()
                    return
            log.info("group %s: rebalance attempt %d of %d by %s met a partition still owned by another "
                     "member; backing off %g s", self.group_id, attempt, self.rebalance_max_retries,
                     self.consumer_id, self.rebalance_backoff_s)
            if self._wanted.wait(self.rebalance_backoff_s):
                self._wanted.clear()  # the view changed meanwhile: the next attempt sees it
        raise RebalanceFailed(f"group {self.group_id}: {self.consumer_id} could not claim its partitions "
                              f"in {self.rebalance_max_retries} attempts")

    def _rebalance_once(self) -> bool:
        """One attempt, under the lock: True once this member owns exactly its share."""
        if self._session_lost:
            if not self._zk.connected:
                self._drop_all()
                return False
            self._drop_all()  # the session is new: what we owned went with the old one
            self.registry.register(self.consumer_id, self._registration())
            self._session_lost = False
        elif not self.registry.registered(self.consumer_id):
            self.registry.register(self.consumer_id, self._registration())
        share = self._my_share()
        if self.auto_commit and self._owned:
            try:
                self._commit()
            except OffsetStorageError as exc:
                log.warning("group %s: committing before the rebalance failed: %s", self.group_id, exc)
        self._release_all()
        positions = self._offsets.fetch(share)
        claimed = []
        for topic, p in sorted(share):
            if not self.registry.claim(topic, p, self.consumer_id):
                for t, q in claimed:
                    self.registry.release(t, q, self.consumer_id)
                return False
            claimed.append((topic, p))
        self._owned = set(share)
        self._committed = dict(positions)
        self._fetcher.assign({tp: positions.get(tp) for tp in share})
        log.info("group %s: %s owns %s", self.group_id, self.consumer_id,
                 ", ".join(f"{t}-{p}" for t, p in sorted(share)) or "nothing")
        return True

    def _my_share(self) -> set[TopicPartition]:
        """This member's partitions by the range assignment over the group as
        ZooKeeper shows it now (nothing while no broker is up)."""
        if not self.registry.broker_ids():
            return set()
        members = self.registry.members()
        by_pattern = self.pattern is not None or any(r.pattern != znodes.PATTERN_STATIC for r in members.values())
        all_topics = self.registry.topics() if by_pattern else []
        consumers_per_topic: dict[str, list[str]] = {}
        for member, registration in members.items():
            for topic in _subscribed(registration, all_topics):
                consumers_per_topic.setdefault(topic, []).append(member)
        mine = [t for t, members_of in consumers_per_topic.items() if self.consumer_id in members_of]
        for topic in mine:
            self.registry.watch_topic(topic, self._rebalance_wanted)
        share = set()
        for topic in mine:
            ranges = range_assign(self.registry.partitions(topic), consumers_per_topic[topic])
            share.update((topic, p) for p in ranges.get(self.consumer_id, []))
        return share

    def _release_all(self) -> None:
        for topic, p in sorted(self._owned):
            self.registry.release(topic, p, self.consumer_id)
        self._drop_all()

    def _drop_all(self) -> None:
        self._owned = set()
        self._fetcher.assign({})

    def _connections_close_quietly(self) -> None:
        connections = getattr(self, "_connections", None)
        if connections is not None:
            connections.close()


def _subscribed(registration: znodes.ConsumerRegistration, all_topics: list[str]) -> list[str]:
    """The topics a member reads: its static list, or the topics its regex
    admits (internal topics, named with a leading "__", never)."""
    if registration.pattern == znodes.PATTERN_STATIC:
        return list(registration.subscription)
    try:
        regex = re.compile(next(iter(registration.subscription)))
    except re.error as exc:
        log.warning("a member's topic filter %r is not a regex (%s); it is given nothing",
                    next(iter(registration.subscription)), exc)
        return []
    matches = (lambda t: regex.fullmatch(t) is not None) if registration.pattern == znodes.PATTERN_WHITE_LIST \
        else (lambda t: regex.fullmatch(t) is None)
    return [t for t in all_topics if not t.startswith("__") and matches(t)]
