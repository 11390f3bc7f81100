"""Where a ZooKeeper-coordinated group keeps its offsets (the next offset to
read of each partition): in ZooKeeper, in Kafka (the group coordinator's
``__consumer_offsets``), or in both.

Writing both is the documented way to move a group from ZooKeeper to Kafka
without losing its place: run the group with dual commit until every member
has committed once, then with Kafka storage alone.  While both are kept, a
read takes the larger of the two, since either may be the one written last.
"""

from __future__ import annotations

import time

from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from hpbroker.errors import ErrorCode
from hpbroker.zkconsumer.broker_client import BrokerConnection, BrokerConnections

RETRY_BACKOFF_S = 0.2
TopicPartition = tuple[str, int]


class OffsetStorageError(Exception):
    """The offsets could not be read or written."""


class ZooKeeperOffsets:
    """``/consumers/<group>/offsets/<topic>/<partition>``, one znode per partition."""

    def __init__(self, registry):
        self.registry = registry

    def fetch(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        found = {}
        for topic, p in sorted(partitions):
            offset = self.registry.read_offset(topic, p)
            if offset is not None and offset >= 0:
                found[(topic, p)] = offset
        return found

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        for (topic, p), offset in sorted(offsets.items()):
            self.registry.write_offset(topic, p, offset)


class KafkaOffsets:
    """OffsetFetch and OffsetCommit to the group's coordinator, as a group that
    is not managed by the broker (generation -1, no member id) commits."""

    def __init__(self, group: str, registry, connections: BrokerConnections, timeout_s: float):
        self.group = group
        self.registry = registry
        self.connections = connections
        self.timeout_s = timeout_s
        self._coordinator: tuple[str, int] | None = None

    def fetch(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(partitions):
            by_topic.setdefault(topic, []).append(p)
        request = OffsetFetchRequest(group_id=GroupId(self.group), require_stable=False, topics=tuple(
            OffsetFetchRequestTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
            for t, ps in by_topic.items()))

        def answer(response):
            if response.error_code != ErrorCode.none:
                return response.error_code, None
            found = {}
            for topic in response.topics:
                for row in topic.partitions:
                    if row.error_code != ErrorCode.none:
                        return row.error_code, None
                    if row.committed_offset >= 0:
                        found[(str(topic.name), int(row.partition_index))] = int(row.committed_offset)
            return ErrorCode.none, found
        return self._ask(request, answer, "fetching")

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        by_topic: dict[str, list] = {}
        for (topic, p), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=i32(p), committed_offset=i64(offset), committed_leader_epoch=i32(-1),
                committed_metadata=""))
        request = OffsetCommitRequest(group_id=GroupId(self.group), generation_id_or_member_epoch=i32(-1),
                                      member_id="", group_instance_id=None, topics=tuple(
                                          OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps))
                                          for t, ps in by_topic.items()))

        def answer(response):
            for topic in response.topics:
                for row in topic.partitions:
                    if row.error_code != ErrorCode.none:
                        return row.error_code, None
            return ErrorCode.none, None
        self._ask(request, answer, "committing")

    def _ask(self, request, answer, doing: str):
        """Send ``request`` to the coordinator until ``answer(response)`` gives
        no error, finding the coordinator again after a retriable one."""
        deadline = time.monotonic() + self.timeout_s
        last = "no broker is registered"
        while True:
            try:
                error, result = answer(self._coordinator_connection().request(request))
                if error == ErrorCode.none:
                    return result
                last = f"the coordinator answered {error.name}"
                if not error.retriable:
                    raise OffsetStorageError(f"{doing} the offsets of group {self.group!r} failed: {last}")
                self._coordinator = None
            except ConnectionError as exc:
                last = str(exc)
                self._coordinator = None
            if time.monotonic() + RETRY_BACKOFF_S > deadline:
                raise OffsetStorageError(f"{doing} the offsets of group {self.group!r} failed within "
                                         f"{self.timeout_s:g} s: {last}")
            time.sleep(RETRY_BACKOFF_S)

    def _coordinator_connection(self) -> BrokerConnection:
        if self._coordinator is None:
            self._coordinator = self._find_coordinator()
        return self.connections.get(*self._coordinator)

    def _find_coordinator(self) -> tuple[str, int]:
        """Ask the live brokers, in turn, where the group's coordinator is."""
        last = "no broker is registered"
        for broker_id in self.registry.broker_ids():
            broker = self.registry.broker(broker_id)
            if broker is None:
                continue
            try:
                response = self.connections.get(broker.host, broker.port).request(
                    FindCoordinatorRequest(key=self.group, key_type=i8(0)))
            except ConnectionError as exc:
                last = str(exc)
                continue
            if response.error_code == ErrorCode.none:
                return str(response.host), int(response.port)
            last = f"broker {broker_id} answered {response.error_code.name}"
        raise ConnectionError(f"no coordinator for group {self.group!r}: {last}")


class DualOffsets:
    """Both: commits go to each, a read takes the larger offset of the two."""

    def __init__(self, zookeeper: ZooKeeperOffsets, kafka: KafkaOffsets):
        self.zookeeper, self.kafka = zookeeper, kafka

    def fetch(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        found = dict(self.zookeeper.fetch(partitions))
        for tp, offset in self.kafka.fetch(partitions).items():
            found[tp] = max(offset, found.get(tp, offset))
        return found

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.kafka.commit(offsets)
        self.zookeeper.commit(offsets)
