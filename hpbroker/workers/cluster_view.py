"""What a handler tells clients about the brokers: who is there, who leads
each partition, who coordinates a group, who is controller.

Standalone, the answer is always this broker.  In cluster mode it is read
from the cluster image this worker keeps (``ImageView``), so every broker
answers alike and clients re-route by themselves after a change.

A broker has an address per listener: a client is told the addresses of the
listener it connected through (``listener``), as Kafka does, so one on an
internal PLAINTEXT listener and one on an external SASL_SSL listener each
reach the brokers the way they came.  ``listener=None`` is the listener the
brokers connect to each other through (each broker's registration names it
first).  A broker without the asked listener is left out of the answers.
"""

from __future__ import annotations

from typing import NamedTuple

from hpbroker.cluster.image import ClusterImage
from hpbroker.errors import ErrorCode
from hpbroker.sentinels import NO_LEADER
from hpbroker.server.ownership import OFFSETS_TOPIC, group_partition


class BrokerNode(NamedTuple):
    broker_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionView(NamedTuple):
    """A partition as Metadata shows it; ``error`` is LEADER_NOT_AVAILABLE without a leader."""
    error: ErrorCode
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


class StandaloneView:
    standalone = True

    def __init__(self, me: BrokerNode, listeners: dict[str, BrokerNode] | None = None):
        self.me = me  # on the brokers' listener
        self.listeners = listeners  # each advertised listener's (None: ``me`` on every listener)

    def _me(self, listener: str | None) -> BrokerNode | None:
        """None for a listener bound but not advertised: nobody was told of it."""
        if listener is None or self.listeners is None:
            return self.me
        return self.listeners.get(listener)

    @property
    def controller_id(self) -> int:
        return self.me.broker_id

    def brokers(self, listener: str | None = None) -> list[BrokerNode]:
        found = self._me(listener)
        return [found] if found is not None else []

    def node(self, broker_id: int, listener: str | None = None) -> BrokerNode | None:
        return self._me(listener) if broker_id == self.me.broker_id else None

    def partition(self, topic: str, partition: int) -> PartitionView:
        me = (self.me.broker_id,)
        return PartitionView(ErrorCode.none, self.me.broker_id, 0, me, me, ())

    def coordinator(self, key: str, partitions: int, topic: str = OFFSETS_TOPIC,
                    listener: str | None = None) -> BrokerNode | None:
        return self._me(listener)


class ImageView:
    standalone = False

    def __init__(self, me: BrokerNode):
        self.me = me
        self.image = ClusterImage()

    @property
    def controller_id(self) -> int:
        return self.image.controller_id

    def brokers(self, listener: str | None = None) -> list[BrokerNode]:
        found = (self.node(broker_id, listener) for broker_id in sorted(self.image.brokers))
        return [node for node in found if node is not None]

    def node(self, broker_id: int, listener: str | None = None) -> BrokerNode | None:
        found = self.image.brokers.get(broker_id)
        if found is None:
            return None
        # None: where the broker says the brokers reach it (its registration's first endpoint)
        address = (found.host, found.port) if listener is None else found.address(listener)
        return None if address is None else BrokerNode(found.broker_id, *address, found.rack)

    def partition(self, topic: str, partition: int) -> PartitionView:
        assignment = self.image.topics.get(topic)
        replicas = tuple(assignment.partitions.get(partition, ())) if assignment is not None else ()
        state = self.image.states.get((topic, partition))
        offline = tuple(r for r in replicas if r not in self.image.brokers)
        if state is None or state.leader == NO_LEADER or state.leader not in self.image.brokers:
            isr = tuple(state.isr) if state is not None else ()
            epoch = state.leader_epoch if state is not None else -1
            return PartitionView(ErrorCode.leader_not_available, NO_LEADER, epoch, replicas, isr, offline)
        return PartitionView(ErrorCode.none, state.leader, state.leader_epoch, replicas, tuple(state.isr), offline)

    def coordinator(self, key: str, partitions: int, topic: str = OFFSETS_TOPIC,
                    listener: str | None = None) -> BrokerNode | None:
        """The leader of the key's partition of ``topic`` (``__consumer_offsets``
        for a group, ``__transaction_state`` for a transactional id, both hashed
        alike), if it has one."""
        found = self.partition(topic, group_partition(key, partitions))
        return None if found.error != ErrorCode.none else self.node(found.leader, listener)
