"""The lease a cluster worker publishes for its leaders (``shared/partition_table.py``):
other workers of the broker count its leader entries as serving only while it
runs, and it runs exactly as long as the worker itself would trust its
leaderships.  A worker's ReplicaManager, wired to a real shared table as a
broker wires it, without ZooKeeper: the image is handed in, the session's
doubts played by hand, a pause played by a clock moved ahead."""

import asyncio
import time

from harness.waiting import until
from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.session_tracker import Session
from hpbroker.replication.fetcher import FetcherSettings
from hpbroker.server.ownership import partition_owner
from hpbroker.shared.partition_table import LEADER, STANDALONE, PartitionTable
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.cluster_topics import ClusterTopics
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.publisher import Publisher
from hpbroker.workers.replicas import ReplicaManager, ReplicaSettings
from tests.test_coordinator_fencing import Link, SkewedClock

ME = 1
SESSION_MS = 6000
TOPIC = "events"


def image() -> ClusterImage:
    """``events-0`` led here, alone in its ISR."""
    brokers = {ME: znodes.BrokerRegistration(ME, "127.0.0.1", 19001)}
    return ClusterImage("c", brokers, ME, {TOPIC: znodes.TopicAssignment(TOPIC, {0: [ME]})},
                        {(TOPIC, 0): znodes.PartitionState(ME, 3, [ME], 1, 0)})


def test_a_leaders_entry_serves_only_within_its_workers_lease(tmp_path):
    clock = SkewedClock()
    table = PartitionTable(1, slots=64)
    reader = table.reader(monotonic=clock.monotonic)

    def serving() -> bool:
        found = reader.read(TOPIC, 0)
        assert found is not None and found.role == LEADER and found.leader_epoch == 3
        return found.serving

    async def scenario():
        link = Link(image())
        logs = LogManager([str(tmp_path)], LogConfig(), replicated=True)
        publisher = Publisher(table.writer(0))
        replicas = ReplicaManager(ReplicaSettings(ME, FetcherSettings(ME), 30000, SESSION_MS), 0, 1, logs, link,
                                  clock=clock, publisher=publisher)
        topics = ClusterTopics([str(tmp_path)], LogConfig(), link, default_replication_factor=1,
                               offsets_replication_factor=1)
        replicas.changed = Partitions(logs, topics, replicas=replicas, publisher=publisher).changed  # as a worker
        topics.apply(link.image())
        replicas.apply(link.image())
        assert not serving(), "no lease before the first tick"
        replicas.tick()
        assert serving()

        replicas.set_session(Session.SUSPENDED)  # the session may live: the worker still leads
        replicas.tick()
        assert serving()
        replicas.set_session(Session.EXPIRED)  # revoked at once, not at the lease's end
        assert not serving()
        replicas.set_session(Session.CONNECTED)
        replicas.apply(link.image())
        replicas.tick()
        assert serving()

        # the worker stops ticking (paused): the lease runs out when it would doubt itself
        clock.skew += SESSION_MS / 2000 - 0.5
        assert serving()
        clock.skew += 1.0
        assert not serving()
        replicas.tick()  # back: it notices the pause, doubts, and grants nothing until confirmed
        assert not serving()
        await until(lambda: replicas.trusted(), "the session confirmed", timeout=10)
        replicas.tick()
        assert serving()

        await replicas.close()
        after = table.reader().read(TOPIC, 0)
        assert after is None or not after.serving, "a stopped worker leaves no lease behind"

    asyncio.run(scenario())


def test_the_pool_revokes_a_dead_workers_lease_and_standalone_entries_need_none():
    table = PartitionTable(2, slots=64)
    writer = table.writer(1)
    led, alone = [p for p in range(16) if partition_owner("t", p, 2) == 1][:2]
    assert writer.publish("t", led, LEADER, True, 1, 0, 5, 5, 5)
    assert writer.publish("t", alone, STANDALONE, True, 0, 0, 5, 5, 5)

    def serving() -> list[bool]:
        found = [table.reader().read("t", p) for p in (led, alone)]
        return [f is not None and f.serving for f in found]

    assert serving() == [False, True], "no lease granted yet"
    writer.grant_lease(time.monotonic() + 60)
    assert serving() == [True, True]
    table.revoke_lease(1)  # the worker died
    assert serving() == [False, True]
