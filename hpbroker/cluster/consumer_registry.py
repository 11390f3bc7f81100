"""The ZooKeeper side of a ZooKeeper-coordinated consumer group: its members'
registrations, who owns which partition, the offsets kept in ZooKeeper, and
the watches that tell a member to rebalance.  Also what such a consumer reads
of the cluster: the live brokers, the topics, their partitions and leaders.

The paths are the ones Kafka's ZooKeeper consumers used (``/consumers/<group>/
ids|owners|offsets``), so an operator's ``zkCli.sh`` habits carry over.  The
rebalancing itself is the consumer's (``hpbroker.zkconsumer``); this module
only reads and writes znodes, keeping kazoo inside ``hpbroker.cluster``.
"""

from __future__ import annotations

import logging
from typing import Callable, NamedTuple

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from hpbroker.cluster import znodes

log = logging.getLogger(__name__)


class ConsumerIdInUse(Exception):
    """Another live session holds this consumer id's registration."""


class Leader(NamedTuple):
    broker_id: int
    host: str
    port: int
    leader_epoch: int


class ConsumerRegistry:
    def __init__(self, client, group: str):
        if not group or "/" in group:
            raise ValueError(f"bad group id {group!r}: it names a znode, so it must be non-empty without '/'")
        self.client = client
        self.group = group
        self._watched_topics: set[str] = set()

    # --- this consumer's registration ---------------------------------------------------
    def register(self, consumer_id: str, registration: znodes.ConsumerRegistration) -> None:
        """Create the ephemeral ``ids/<consumer_id>``; a node left by this same
        session is rewritten, one held by another live session is refused."""
        path = f"{znodes.consumer_ids_path(self.group)}/{consumer_id}"
        try:
            self.client.create(path, registration.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                _data, stat = self.client.get(path)
            except NoNodeError:  # its session just ended: try once more
                self.client.create(path, registration.encode(), ephemeral=True, makepath=True)
                return
            if stat.ephemeralOwner != self.client.client_id[0]:
                raise ConsumerIdInUse(f"consumer id {consumer_id!r} is registered in group {self.group!r} "
                                      f"by another live session") from None
            self.client.set(path, registration.encode())

    def registered(self, consumer_id: str) -> bool:
        return self.client.exists(f"{znodes.consumer_ids_path(self.group)}/{consumer_id}") is not None

    def unregister(self, consumer_id: str) -> None:
        try:
            self.client.delete(f"{znodes.consumer_ids_path(self.group)}/{consumer_id}")
        except NoNodeError:
            pass

    def members(self) -> dict[str, znodes.ConsumerRegistration]:
        """Every registered consumer of the group; one with an unreadable
        registration is left out (and logged), as it cannot be given a share."""
        ids_path = znodes.consumer_ids_path(self.group)
        found = {}
        for consumer_id in self._children(ids_path):
            path = f"{ids_path}/{consumer_id}"
            try:
                found[consumer_id] = znodes.ConsumerRegistration.decode(path, self.client.get(path)[0])
            except NoNodeError:
                continue  # left while we looked
            except znodes.ZnodeFormatError as exc:
                log.warning("group %s: ignoring consumer %s: %s", self.group, consumer_id, exc)
        return found

    # --- partition ownership -------------------------------------------------------------
    def claim(self, topic: str, partition: int, consumer_id: str) -> bool:
        """Own the partition (an ephemeral ``owners/<topic>/<p>``); False when
        another consumer still owns it."""
        path = f"{znodes.consumer_owners_path(self.group, topic)}/{partition}"
        try:
            self.client.create(path, consumer_id.encode(), ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            return self.owner(topic, partition) == consumer_id

    def owner(self, topic: str, partition: int) -> str | None:
        try:
            return self.client.get(f"{znodes.consumer_owners_path(self.group, topic)}/{partition}")[0].decode()
        except NoNodeError:
            return None

    def owners(self) -> dict[tuple[str, int], str]:
        """Every claimed partition of the group -> its owner."""
        found = {}
        for topic in self._children(f"{znodes.CONSUMERS}/{self.group}/owners"):
            for p in self._children(znodes.consumer_owners_path(self.group, topic)):
                owner = self.owner(topic, int(p)) if p.isdigit() else None
                if owner is not None:
                    found[(topic, int(p))] = owner
        return found

    def release(self, topic: str, partition: int, consumer_id: str) -> None:
        """Give the partition up, if this consumer owns it."""
        path = f"{znodes.consumer_owners_path(self.group, topic)}/{partition}"
        try:
            data, stat = self.client.get(path)
            if data.decode() == consumer_id:
                self.client.delete(path, version=stat.version)
        except NoNodeError:
            pass

    # --- offsets kept in ZooKeeper -------------------------------------------------------------
    def read_offset(self, topic: str, partition: int) -> int | None:
        """The next offset to read, or None when none is stored (or it is
        unreadable: logged, and treated as none, so auto_offset_reset decides)."""
        path = f"{znodes.consumer_offsets_path(self.group, topic)}/{partition}"
        try:
            return znodes.decode_consumer_offset(path, self.client.get(path)[0])
        except NoNodeError:
            return None
        except znodes.ZnodeFormatError as exc:
            log.warning("group %s: %s; treating it as no offset", self.group, exc)
            return None

    def write_offset(self, topic: str, partition: int, offset: int) -> None:
        path = f"{znodes.consumer_offsets_path(self.group, topic)}/{partition}"
        data = znodes.encode_consumer_offset(offset)
        try:
            self.client.set(path, data)
        except NoNodeError:
            try:
                self.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.client.set(path, data)

    # --- the cluster as a consumer sees it ----------------------------------------------------
    def broker_ids(self) -> list[int]:
        return sorted(int(b) for b in self._children(znodes.BROKER_IDS) if b.isdigit())

    def broker(self, broker_id: int) -> znodes.BrokerRegistration | None:
        try:
            return znodes.BrokerRegistration.decode(broker_id, self.client.get(znodes.broker_path(broker_id))[0])
        except NoNodeError:
            return None

    def topics(self) -> list[str]:
        return sorted(self._children(znodes.TOPICS))

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; [] when it does not exist."""
        try:
            data = self.client.get(znodes.topic_path(topic))[0]
        except NoNodeError:
            return []
        return sorted(znodes.TopicAssignment.decode(topic, data).partitions)

    def leader(self, topic: str, partition: int) -> Leader | None:
        """Where to fetch the partition from; None while it has no live leader."""
        try:
            data, stat = self.client.get(znodes.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        state = znodes.PartitionState.decode(topic, partition, data, stat.version)
        broker = self.broker(state.leader) if state.leader >= 0 else None
        if broker is None:
            return None
        return Leader(state.leader, broker.host, broker.port, state.leader_epoch)

    # --- watches ----------------------------------------------------------------------------
    def watch(self, changed: Callable[[str], None], topics_too: bool) -> None:
        """Call ``changed(reason)`` whenever the group's members or the live
        brokers change, and with ``topics_too`` when a topic is created or
        deleted.  ``changed`` runs on kazoo's thread: it must only take note."""
        for path in (znodes.consumer_ids_path(self.group), znodes.BROKER_IDS, znodes.TOPICS):
            self.client.ensure_path(path)
        self._children_watch(znodes.consumer_ids_path(self.group), changed, "the group's members changed")
        self._children_watch(znodes.BROKER_IDS, changed, "the live brokers changed")
        if topics_too:
            self._children_watch(znodes.TOPICS, changed, "the topics changed")

    def watch_topic(self, topic: str, changed: Callable[[str], None]) -> None:
        """Call ``changed`` when the topic's partitions change (partitions added)."""
        if topic in self._watched_topics:
            return
        self._watched_topics.add(topic)
        first = [True]

        def on_data(_data, _stat):
            if first[0]:
                first[0] = False  # kazoo calls at once with the current value
            else:
                changed(f"the partitions of {topic} changed")
            return topic in self._watched_topics

        DataWatch(self.client, znodes.topic_path(topic), on_data)

    def unwatch_topic(self, topic: str) -> None:
        self._watched_topics.discard(topic)

    def _children_watch(self, path: str, changed: Callable[[str], None], reason: str) -> None:
        first = [True]

        def on_children(_children):
            if first[0]:
                first[0] = False
            else:
                changed(reason)

        ChildrenWatch(self.client, path, on_children)

    def on_session(self, lost: Callable[[], None], connected: Callable[[], None]) -> None:
        """``lost()`` when the session has expired (every ephemeral node of this
        consumer is gone), ``connected()`` each time the connection is back."""
        def listener(state):
            if state == KazooState.LOST:
                lost()
            elif state == KazooState.CONNECTED:
                connected()
        self.client.add_listener(listener)

    def _children(self, path: str) -> list[str]:
        try:
            return self.client.get_children(path)
        except NoNodeError:
            return []
