"""A cluster worker's group coordinator, wired to its replica roles as a broker's
worker wires them, without ZooKeeper: the image is handed in, and the session's
doubts (a lost connection, which is none, an expired session, a pause of the
worker) are played by hand.

While the leadership of a group's ``__consumer_offsets`` partition is fenced,
this broker is still the coordinator the cluster names: a group request is
answered COORDINATOR_LOAD_IN_PROGRESS, which clients retry where they are.
NOT_COORDINATOR would send them looking elsewhere, and librdkafka does not
retry an OffsetFetch answered so: the partitions it asked about are never
fetched, and a consumer that has just joined reads nothing."""

import asyncio
import time

from harness.waiting import until
from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.session_tracker import Session
from hpbroker.errors import ErrorCode
from hpbroker.replication.fetcher import FetcherSettings
from hpbroker.server.config import BrokerConfig
from hpbroker.server.ownership import OFFSETS_TOPIC, group_partition
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.cluster_topics import ClusterTopics
from hpbroker.workers.groups import GroupCoordinator
from hpbroker.workers.owner_calls import (
    FetchedOffset,
    FetchedOffsets,
    Heartbeat,
    JoinGroup,
    OffsetCommit,
    OffsetFetch,
    PartitionError,
    SyncGroup,
)
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.replicas import ReplicaManager, ReplicaSettings

ME, OTHER = 1, 2
SESSION_MS = 6000
PROTOCOLS = [("range", b"r")]


class Link:
    """What a ReplicaManager asks of its SharedLink when the session is in doubt."""

    def __init__(self, image: ClusterImage):
        self.current = image
        self.rereads = 0

    def image(self) -> ClusterImage:
        return self.current

    async def confirm(self) -> None:
        self.rereads += 1

    def tracked(self) -> bool:
        return True

    def tracked_until(self) -> float:
        return float("inf")


class SkewedClock:
    """The system clock, able to jump ahead (a pause of the worker)."""

    def __init__(self):
        self.skew = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.skew

    def now_ms(self) -> int:
        return int((time.time() + self.skew) * 1000)

    def call_later(self, delay_ms, callback, *args):
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback, *args)


def image() -> ClusterImage:
    """__consumer_offsets-0 led here, __consumer_offsets-1 on another broker alone."""
    brokers = {b: znodes.BrokerRegistration(b, "127.0.0.1", 19000 + b) for b in (ME, OTHER)}
    offsets = znodes.TopicAssignment(OFFSETS_TOPIC, {0: [ME], 1: [OTHER]})
    states = {(OFFSETS_TOPIC, 0): znodes.PartitionState(ME, 0, [ME], 1, 0),
              (OFFSETS_TOPIC, 1): znodes.PartitionState(OTHER, 0, [OTHER], 1, 0)}
    return ClusterImage("c", brokers, ME, {OFFSETS_TOPIC: offsets}, states)


def group_in(p: int) -> str:
    return next(g for g in (f"group-{i}" for i in range(100)) if group_partition(g, 2) == p)


def test_a_fenced_coordinator_is_waited_for_not_looked_for_elsewhere(tmp_path):
    clock = SkewedClock()

    async def scenario():
        config = BrokerConfig.from_sources(overrides={"offsets.topic.num.partitions": "2",
                                                      "group.initial.rebalance.delay.ms": "0"})
        link = Link(image())
        logs = LogManager([str(tmp_path)], LogConfig(), replicated=True)
        topics = ClusterTopics([str(tmp_path)], LogConfig(), link, default_replication_factor=1,
                               offsets_replication_factor=1)
        replicas = ReplicaManager(ReplicaSettings(ME, FetcherSettings(ME), 30000, SESSION_MS), 0, 1, logs, link,
                                  clock=clock)
        partitions = Partitions(logs, topics, replicas=replicas)
        c = GroupCoordinator(partitions, topics, config, 0, 1, leads=partitions.leads, fenced=partitions.in_doubt)
        replicas.on_leadership = lambda topic, p, leading: c.leadership_changed(p, leading)
        topics.apply(link.image())
        replicas.apply(link.image())
        mine, theirs = group_in(0), group_in(1)
        asked = [("events", [0])]
        committed = FetchedOffsets(ErrorCode.none, [FetchedOffset("events", 0, 7, -1, "")])

        def fetch(group_id):
            return c.offset_fetch(OffsetFetch(group_id, asked))

        def heartbeat():
            return c.heartbeat(Heartbeat(mine, 1, member)).error

        def commit(offset):
            return c.offset_commit(OffsetCommit(mine, 1, member, None, [("events", 0, offset, -1, "")], 9))

        joined = await c.join_group(JoinGroup(mine, "", None, "c", "/h", 6000, 6000, "consumer", PROTOCOLS, False))
        member = joined.member_id
        synced = await c.sync_group(SyncGroup(mine, 1, member, None, None, None, [(member, b"a")]))
        assert synced.error == ErrorCode.none
        assert (await commit(7)).partitions == [PartitionError("events", 0, ErrorCode.none)]
        assert fetch(mine) == committed
        assert fetch(theirs).error == ErrorCode.not_coordinator  # another broker leads it

        # the connection to ZooKeeper is lost: the session may live, so this broker coordinates on
        replicas.set_session(Session.SUSPENDED)
        assert partitions.leads(OFFSETS_TOPIC, 0) and not partitions.in_doubt(OFFSETS_TOPIC, 0)
        assert fetch(mine) == committed

        # the session expired: leadership in doubt, and this broker still the coordinator
        replicas.set_session(Session.EXPIRED)
        assert partitions.in_doubt(OFFSETS_TOPIC, 0) and not partitions.leads(OFFSETS_TOPIC, 0)
        assert not partitions.in_doubt(OFFSETS_TOPIC, 1)
        assert fetch(mine).error == ErrorCode.coordinator_load_in_progress
        assert heartbeat() == ErrorCode.coordinator_load_in_progress
        assert (await c.sync_group(SyncGroup(mine, 1, member, None, None, None, []))).error == \
            ErrorCode.coordinator_load_in_progress
        assert (await commit(8)).partitions == [PartitionError("events", 0, ErrorCode.coordinator_load_in_progress)]
        assert fetch(theirs).error == ErrorCode.not_coordinator
        replicas.set_session(Session.CONNECTED)
        replicas.apply(link.image())
        assert fetch(mine) == committed  # the group and its offsets are still here
        assert heartbeat() == ErrorCode.none

        # a pause of the worker (no tick for over half the session timeout): in doubt until
        # the states are read again, then coordinating as before
        clock.skew += SESSION_MS / 1000
        assert fetch(mine).error == ErrorCode.coordinator_load_in_progress
        assert (await c.join_group(JoinGroup(mine, member, None, "c", "/h", 6000, 6000, "consumer", PROTOCOLS,
                                             False))).error == ErrorCode.coordinator_load_in_progress
        await until(lambda: partitions.leads(OFFSETS_TOPIC, 0), "the states read again to confirm the leadership",
                    timeout=10)
        assert link.rereads == 1
        assert fetch(mine) == committed
        assert heartbeat() == ErrorCode.none

        # leadership moved away: now it is another broker's group
        moved = image()
        moved.states[(OFFSETS_TOPIC, 0)] = znodes.PartitionState(OTHER, 1, [OTHER, ME], 1, 1)
        replicas.apply(moved)
        assert fetch(mine).error == ErrorCode.not_coordinator
        c.close()
        await replicas.close()
        logs.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
