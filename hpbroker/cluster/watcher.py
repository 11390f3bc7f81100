"""Keeps a ``ClusterImage`` current with ZooKeeper watches.

Each kazoo watch recipe calls back with what it read; each callback updates
its part of the state under a lock and bumps a generation, and whoever acts
on the image takes a consistent copy with ``image()`` (after
``wait_changed``).  kazoo's recipes re-arm themselves after a reconnect and
after a new session, so the image catches up on everything missed while
disconnected.  A recipe's callbacks come in the order of its reads, but two
recipes' do not: after a reconnect each re-reads on a thread of its own.  So
one part of the state has one recipe that decides it (a broker's presence,
its node's watch; never the list of ``/brokers/ids``).  Partition states are
also read again on demand (``reread_states``); the zxid of each write decides
which of two reads is the newer.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.security.acls import RESOURCE_NAMES, AclError, Entry, PatternType, Resource, ResourceType, decode_entries
from hpbroker.sentinels import NO_CONTROLLER

log = logging.getLogger(__name__)


class ImageWatcher:
    def __init__(self, client: KazooClient, cluster_id: str = ""):
        self.client = client
        self.cluster_id = cluster_id
        self._lock = threading.Condition()
        self._generation = 0
        self._brokers: dict[int, znodes.BrokerRegistration] = {}
        self._controller = NO_CONTROLLER
        self._topics: dict[str, znodes.TopicAssignment] = {}
        self._states: dict[tuple[str, int], znodes.PartitionState] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._deleting: frozenset[str] = frozenset()
        self._shutting_down: frozenset[int] = frozenset()
        self._watched_brokers: set[int] = set()
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._acls: dict[Resource, frozenset[Entry]] = {}
        self._acl_version = 0
        self._watched_acls: set[Resource] = set()
        self._stopped = False

    def start(self) -> None:
        for path in znodes.PERSISTENT_PATHS:
            self.client.ensure_path(path)
        ChildrenWatch(self.client, znodes.BROKER_IDS, self._on_broker_ids)
        ChildrenWatch(self.client, znodes.TOPICS, self._on_topics)
        ChildrenWatch(self.client, znodes.DELETE_TOPICS, self._on_deleting)
        ChildrenWatch(self.client, znodes.CONTROLLED_SHUTDOWN, self._on_shutting_down)
        DataWatch(self.client, znodes.CONTROLLER, self._on_controller)
        for path in (znodes.ACL_LITERAL_CHANGES, znodes.ACL_PREFIXED_CHANGES):
            self.client.ensure_path(path)
        for kind, type_name in RESOURCE_NAMES.items():
            for pattern in (PatternType.LITERAL, PatternType.PREFIXED):
                path = f"{znodes.acl_root(pattern is PatternType.PREFIXED)}/{type_name}"
                self.client.ensure_path(path)
                ChildrenWatch(self.client, path, self._acl_children(kind, pattern, path))

    def stop(self) -> None:
        """Watches end at their next event (a recipe stops when its callback returns False)."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    # --- reading ----------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._generation

    def image(self) -> ClusterImage:
        with self._lock:
            return ClusterImage(self.cluster_id, dict(self._brokers), self._controller, dict(self._topics),
                                dict(self._states), {t: dict(c) for t, c in self._configs.items()}, self._deleting,
                                self._shutting_down, dict(self._acls), self._acl_version)

    def wait_changed(self, since: int, timeout: float | None = None) -> int:
        """Block until the generation passes ``since`` (or the timeout, or stop); the generation now."""
        with self._lock:
            self._lock.wait_for(lambda: self._generation != since or self._stopped, timeout)
            return self._generation

    def poke(self) -> None:
        """Wake whoever waits on the image (work that is not a ZooKeeper change)."""
        with self._lock:
            self._changed()

    def reread_states(self) -> None:
        """Read every watched partition state again (blocking): after a
        reconnect, before trusting the image for leadership."""
        with self._lock:
            keys = sorted(self._watched_states)
        read = {}
        for key in keys:
            try:
                data, stat = self.client.get(znodes.partition_state_path(*key))
            except NoNodeError:
                continue
            try:
                read[key] = znodes.PartitionState.decode(*key, data, stat.version, stat.mzxid)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring the state of %s-%d: %s", *key, exc)

        def change() -> None:
            for key, state in read.items():
                if key in self._watched_states and not self._older(key, state.zxid):
                    self._states[key] = state
        self._update(change)

    def _older(self, key: tuple[str, int], zxid: int) -> bool:
        """A state written at ``zxid`` is older than the one held (the caller holds
        the lock).  The zxid orders every write, a node deleted and made again
        included, where its version would start over."""
        current = self._states.get(key)
        return current is not None and zxid < current.zxid

    def _changed(self) -> None:
        # caller holds the lock
        self._generation += 1
        self._lock.notify_all()

    # --- callbacks (kazoo's threads) -----------------------------------------------------
    def _on_broker_ids(self, children: list[str]) -> bool:
        # The list only finds brokers to watch; whether one is registered is its
        # node's watch's say. A list read before a broker registered again can
        # arrive after that watch delivered the new node: dropping the broker
        # then was for good, and a broker missing from its own image fetches as
        # no incarnation, which no leader lets into an ISR.
        ids = {int(c) for c in children if c.isdigit()}
        with self._lock:
            if self._stopped:
                return False
            new = ids - self._watched_brokers
            self._watched_brokers |= new
        for broker_id in sorted(new):
            DataWatch(self.client, znodes.broker_path(broker_id), self._broker_watch(broker_id))
        return True

    def _update(self, change, while_=lambda: True) -> bool:
        """Apply ``change`` to the state under the lock and wake the waiters;
        False, which ends the watch, once stopped or once ``while_()`` is false.
        ``while_`` is asked under the lock: another watch's callback (a topic's
        deletion) may be changing what it reads on another thread."""
        with self._lock:
            if self._stopped or not while_():
                return False
            change()
            self._changed()
        return True

    def _broker_watch(self, broker_id: int):
        def change(data, stat) -> None:
            if data is None:
                self._brokers.pop(broker_id, None)  # keep watching: a restarted broker registers again
                return
            try:
                # the creating zxid is the broker epoch: a restart shows as a new one
                # even when the watch never saw the old node go
                self._brokers[broker_id] = znodes.BrokerRegistration.decode(broker_id, data, stat.czxid)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring broker %d's registration: %s", broker_id, exc)
        return lambda data, stat: self._update(lambda: change(data, stat))

    def _on_controller(self, data, _stat) -> bool:
        def change() -> None:
            try:
                self._controller = znodes.decode_controller(data) if data else NO_CONTROLLER
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring %s: %s", znodes.CONTROLLER, exc)
                self._controller = NO_CONTROLLER
        return self._update(change)

    def _on_deleting(self, children: list[str]) -> bool:
        return self._update(lambda: setattr(self, "_deleting", frozenset(children)))

    def _on_shutting_down(self, children: list[str]) -> bool:
        return self._update(lambda: setattr(self, "_shutting_down", frozenset(int(c) for c in children if c.isdigit())))

    def _on_topics(self, children: list[str]) -> bool:
        with self._lock:
            if self._stopped:
                return False
            new = set(children) - self._watched_topics
            self._watched_topics |= new
        for topic in sorted(new):
            DataWatch(self.client, znodes.topic_path(topic), self._topic_watch(topic))
            DataWatch(self.client, znodes.topic_config_path(topic), self._config_watch(topic))
        return True

    def _topic_watch(self, topic: str):
        def on_data(data, _stat) -> bool:
            with self._lock:
                if self._stopped:
                    return False
                if data is None:  # deleted: forget it and its partitions
                    self._topics.pop(topic, None)
                    self._configs.pop(topic, None)
                    for key in [k for k in self._states if k[0] == topic]:
                        del self._states[key]
                    self._watched_topics.discard(topic)
                    self._watched_states -= {k for k in self._watched_states if k[0] == topic}
                    self._changed()
                    return False  # a topic created again gets a new watch from _on_topics
                try:
                    assignment = znodes.TopicAssignment.decode(topic, data)
                except znodes.ZnodeFormatError as exc:
                    log.error("ignoring topic %s: %s", topic, exc)
                    return True
                self._topics[topic] = assignment
                new = {(topic, p) for p in assignment.partitions} - self._watched_states
                self._watched_states |= new
                self._changed()
            for key in sorted(new):
                DataWatch(self.client, znodes.partition_state_path(*key), self._state_watch(*key))
            return True
        return on_data

    def _state_watch(self, topic: str, partition: int):
        key = (topic, partition)

        def change(data, stat) -> None:
            if data is None:
                self._states.pop(key, None)
                return
            if self._older(key, stat.mzxid):
                return  # read before a re-read (reread_states) that was applied first: not news
            try:
                self._states[key] = znodes.PartitionState.decode(topic, partition, data, stat.version, stat.mzxid)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring the state of %s-%d: %s", topic, partition, exc)
        # a watch of a deleted topic's partition ends (its topic watch forgot it)
        return lambda data, stat: self._update(lambda: change(data, stat), while_=lambda: key in self._watched_states)

    def _config_watch(self, topic: str):
        def change(data) -> None:
            if data is None:
                self._configs.pop(topic, None)
                return
            try:
                self._configs[topic] = znodes.decode_topic_config(topic, data)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring topic %s's config: %s", topic, exc)
        return lambda data, _stat: self._update(lambda: change(data), while_=lambda: topic in self._watched_topics)

    # --- ACLs: a watch per resource pattern that has (or had) any --------------------------------
    def _acl_children(self, kind: ResourceType, pattern: PatternType, parent: str):
        def on_children(children: list[str]) -> bool:
            with self._lock:
                if self._stopped:
                    return False
                new = {Resource(kind, name, pattern) for name in children} - self._watched_acls
                self._watched_acls |= new
            for resource in sorted(new):
                DataWatch(self.client, f"{parent}/{resource.name}", self._acl_watch(resource))
            return True
        return on_children

    def _acl_watch(self, resource: Resource):
        def on_data(data, _stat) -> bool:
            with self._lock:
                if self._stopped:
                    return False
                if data is None:  # its last ACL removed: the znode goes with it
                    # the watch goes on: a znode made again at once may be listed before this news
                    # arrives, so a new watch from _acl_children could not be counted on
                    if self._acls.pop(resource, None) is not None:
                        self._acl_version += 1
                        self._changed()
                    return True
                try:
                    entries = decode_entries(data)
                except AclError as exc:
                    log.error("ignoring the ACLs of %s: %s", resource, exc)
                    return True
                if entries:
                    self._acls[resource] = entries
                else:
                    self._acls.pop(resource, None)
                self._acl_version += 1
                self._changed()
            return True
        return on_data
