"""While this worker cannot reach ZooKeeper: which leaderships the other brokers
know to have moved on.

A broker whose connection to ZooKeeper is down keeps its leaderships, since
its session may well live (a ZooKeeper outage is ridden out, as Kafka's
brokers do).  But when only this broker is cut off, its session expires, the
controller elects new leaders, and this broker's frozen image would go on
naming itself leader: its Metadata answers would steer every client back to
it, and it would take writes nobody else copies.

So while disconnected, each worker asks the other brokers (Metadata, over the
Kafka protocol, about once a second) about the partitions its image says this
broker leads.  A peer that names a newer leader epoch knows of an election
this broker missed: that state is laid over the image (``merged``), so the
worker stops leading, follows the new leader, and its Metadata names it.
Peers that are cut off too know no newer epoch, so an outage every broker
sees changes nothing; an answer can only ever end a leadership, never grant
one.  Once the session is back, ZooKeeper's own states take over again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.errors import ErrorCode
from hpbroker.replication.client import ClientConnection

log = logging.getLogger(__name__)

ASK_EVERY_S = 1.0
ANSWER_WITHIN_S = 2.0
_NO_ZNODE = -1  # learnt from a peer: no znode version or zxid to write against


class PeerStates:
    def __init__(self, broker_id: int, on_change=lambda: None, every_s: float = ASK_EVERY_S):
        self.broker_id = broker_id
        self.on_change = on_change  # the overrides changed: apply the merged image again
        self.every_s = every_s
        self.overrides: dict[tuple[str, int], znodes.PartitionState] = {}
        self._task: asyncio.Task | None = None

    def merged(self, image: ClusterImage) -> ClusterImage:
        """``image`` with every state a peer knows a newer leader epoch of."""
        newer = {key: state for key, state in self.overrides.items()
                 if key in image.states and state.leader_epoch > image.states[key].leader_epoch}
        if not newer:
            return image
        return dataclasses.replace(image, states={**image.states, **newer})

    def start(self, current_image) -> None:
        """Ask the peers until ``stop``; ``current_image()`` is this worker's (frozen) image."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(current_image))

    def stop(self) -> None:
        """ZooKeeper is reachable again: its states are the truth."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.overrides.clear()

    async def _run(self, current_image) -> None:
        while True:
            try:
                self._take(await self._gather(current_image()))
            except Exception:  # noqa: BLE001 - asked again next time; the worker serves on
                log.exception("asking the other brokers which leaderships moved failed")
            await asyncio.sleep(self.every_s)

    async def _gather(self, image: ClusterImage):
        """(epochs this broker leads at, states the peers answer) for what ``image`` says it leads."""
        led = {key: state.leader_epoch for key, state in image.states.items() if state.leader == self.broker_id}
        peers = [b for b in image.brokers.values() if b.broker_id != self.broker_id]
        if not led or not peers:
            return led, []
        topics = sorted({topic for topic, _ in led})
        return led, await asyncio.gather(*(self._ask(peer, topics) for peer in peers))

    def _take(self, gathered) -> None:
        led, answers = gathered
        changed = False
        for states in answers:
            for key, state in states.items():
                known = self.overrides.get(key)
                if key in led and state.leader_epoch > led[key] and (
                        known is None or state.leader_epoch > known.leader_epoch):
                    log.warning("%s-%d: another broker knows leader %d at epoch %d (this broker, cut off from "
                                "ZooKeeper, led at epoch %d): following it", *key, state.leader, state.leader_epoch,
                                led[key])
                    self.overrides[key] = state
                    changed = True
        if changed:
            self.on_change()

    async def _ask(self, peer, topics: list[str]) -> dict[tuple[str, int], znodes.PartitionState]:
        """The partition states ``peer`` answers for ``topics``; {} when it cannot be asked."""
        request = MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        try:
            connection = await ClientConnection.open(peer.host, peer.port, f"broker-{self.broker_id}-peer-states",
                                                     timeout=ANSWER_WITHIN_S)
        except (OSError, asyncio.TimeoutError):
            return {}
        try:
            response = await connection.send(request, timeout=ANSWER_WITHIN_S)
        except ConnectionError:
            return {}
        finally:
            connection.close()
        found = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none or topic.name is None:
                continue
            for p in topic.partitions:
                if p.error_code in (ErrorCode.none, ErrorCode.leader_not_available):
                    found[(topic.name, p.partition_index)] = znodes.PartitionState(
                        p.leader_id, p.leader_epoch, list(p.isr_nodes), _NO_ZNODE, _NO_ZNODE, _NO_ZNODE)
        return found
