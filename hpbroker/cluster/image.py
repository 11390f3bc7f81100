"""What a broker knows of the cluster: ZooKeeper's state, as one value.

The image is rebuilt from watches (``watcher``) and handed whole to whoever
acts on it: the controller reconciles it against what should be, the workers
serve Metadata from it and take their partitions' roles from it.  It crosses
process boundaries as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from hpbroker.cluster.znodes import BrokerRegistration, PartitionState, TopicAssignment

NO_CONTROLLER = -1


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

    @property
    def live(self) -> set[int]:
        return set(self.brokers)

    def partitions(self):
        """(topic, partition, replicas, state or None) for every assigned partition, sorted."""
        for topic in sorted(self.topics):
            for p, replicas in sorted(self.topics[topic].partitions.items()):
                yield topic, p, replicas, self.states.get((topic, p))

    def led_by(self, broker_id: int) -> list[tuple[str, int]]:
        return [key for key, state in sorted(self.states.items()) if state.leader == broker_id]

    def with_changes(self, **changes) -> "ClusterImage":
        return replace(self, **changes)

    # --- JSON, for the workers ----------------------------------------------------
    def to_json(self) -> bytes:
        return json.dumps({
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id,
            "brokers": [[b.broker_id, b.host, b.port, b.rack, b.listener] for b in self.brokers.values()],
            "topics": [[t.topic, t.topic_id, {str(p): r for p, r in t.partitions.items()}] for t in self.topics.values()],
            "states": [[topic, p, s.leader, s.leader_epoch, s.isr, s.controller_epoch, s.zk_version]
                       for (topic, p), s in self.states.items()],
            "topic_configs": self.topic_configs,
            "deleting": sorted(self.topics_being_deleted),
            "shutting_down": sorted(self.shutting_down),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "ClusterImage":
        obj = json.loads(data)
        return cls(
            cluster_id=obj["cluster_id"],
            controller_id=obj["controller_id"],
            brokers={b[0]: BrokerRegistration(b[0], b[1], b[2], b[3], b[4]) for b in obj["brokers"]},
            topics={t[0]: TopicAssignment(t[0], {int(p): r for p, r in t[2].items()}, t[1]) for t in obj["topics"]},
            states={(s[0], s[1]): PartitionState(s[2], s[3], s[4], s[5], s[6]) for s in obj["states"]},
            topic_configs=obj["topic_configs"],
            topics_being_deleted=frozenset(obj["deleting"]),
            shutting_down=frozenset(obj["shutting_down"]),
        )
