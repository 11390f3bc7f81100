"""What a handler tells clients about the brokers: who is there, who leads
each partition, who coordinates a group, who is controller.

Standalone, the answer is always this broker.  In cluster mode it is read
from the cluster image this worker keeps (``ImageView``), so every broker
answers alike and clients re-route by themselves after a change.
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

    def __init__(self, me: BrokerNode):
        self.me = me

    @property
    def controller_id(self) -> int:
        return self.me.broker_id

    def brokers(self) -> list[BrokerNode]:
        return [self.me]

    def node(self, broker_id: int) -> BrokerNode | None:
        return self.me if broker_id == self.me.broker_id else None

    def partition(self, topic: str, partition: int) -> PartitionView:
        me = (self.me.broker_id,)
        return PartitionView(ErrorCode.none, self.me.broker_id, 0, me, me, ())

    def coordinator(self, key: str, partitions: int, topic: str = OFFSETS_TOPIC) -> BrokerNode | None:
        return self.me


class ImageView:
    standalone = False

    def __init__(self, me: BrokerNode):
        self.me = me
        self.image = ClusterImage()

    @property
    def controller_id(self) -> int:
        return self.image.controller_id

    def brokers(self) -> list[BrokerNode]:
        return [BrokerNode(b.broker_id, b.host, b.port, b.rack) for _id, b in sorted(self.image.brokers.items())]

    def node(self, broker_id: int) -> BrokerNode | None:
        found = self.image.brokers.get(broker_id)
        return None if found is None else BrokerNode(found.broker_id, found.host, found.port, found.rack)

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

    def coordinator(self, key: str, partitions: int, topic: str = OFFSETS_TOPIC) -> BrokerNode | None:
        """The leader of the key's partition of ``topic`` (``__consumer_offsets``
        for a group, ``__transaction_state`` for a transactional id, both hashed
        alike), if it has one."""
        found = self.partition(topic, group_partition(key, partitions))
        return None if found.error != ErrorCode.none else self.node(found.leader)
