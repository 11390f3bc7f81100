"""What a broker knows of the cluster: ZooKeeper's state, as one value.

The image is rebuilt from watches (``watcher``) and handed whole to whoever
acts on it: the controller reconciles it against what should be; a member
watches its own leaderships in it during a controlled shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpbroker.cluster.znodes import BrokerRegistration, PartitionState, TopicAssignment
from hpbroker.security.acls import Entry, Resource
from hpbroker.sentinels import NO_CONTROLLER


@dataclass(frozen=True)
class ClusterImage:
    cluster_id: str = ""
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controller_id: int = NO_CONTROLLER
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topics_being_deleted: frozenset[str] = frozenset()
    shutting_down: frozenset[int] = frozenset()  # brokers in controlled shutdown
    acls: dict[Resource, frozenset[Entry]] = field(default_factory=dict)
    acl_version: int = 0  # bumped by every change of the ACLs: workers rebuild their index only then

    @property
    def live(self) -> set[int]:
        return set(self.brokers)

    def partitions(self):
        """(topic, partition, replicas, state or None) for every assigned partition, sorted."""
        for topic in sorted(self.topics):
            for p, replicas in sorted(self.topics[topic].partitions.items()):
                yield topic, p, replicas, self.states.get((topic, p))
