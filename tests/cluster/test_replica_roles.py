"""A worker's replica roles against a real ZooKeeper: the states are written
here as a controller would write them, and the broker's session, lent to
the worker (a ``SharedLink``), brings them to a ``ReplicaManager`` over real logs.  The
follower is played by ``FollowerFetch`` calls, exactly what the Fetch handler
makes of a follower's request."""

import asyncio

import pytest

from harness.waiting import until
from hpbroker.cluster import registration, session, znodes
from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch
from hpbroker.workers.owner_calls import Append, Locate, PartitionBounds, WaitReplicated
from hpbroker.workers.partition import Role
from tests.cluster.members import SESSION_MS, worker

LAG_MS = 300
TOPIC = "t"


def batch(n: int) -> bytearray:
    return bytearray(encode_batch([Record(i, 0, None, b"v%d" % i) for i in range(n)]))


class Controller:
    """Writes the partition state the way the controller does (and reads it back)."""

    def __init__(self, connect: str):
        self.client = session.connect(connect, SESSION_MS, 10000)
        registration.ensure_layout(self.client)
        for broker_id in (1, 2):
            self.register(broker_id)

    def register(self, broker_id: int) -> int:
        """(Re)register ``broker_id`` as a broker starting up does; its broker epoch (the czxid)."""
        path = znodes.broker_path(broker_id)
        if self.client.exists(path):
            self.client.delete(path)
        self.client.create(path, znodes.BrokerRegistration(broker_id, "127.0.0.1", 19000 + broker_id).encode(),
                           ephemeral=True)
        return self.epoch(broker_id)

    def epoch(self, broker_id: int) -> int:
        stat = self.client.exists(znodes.broker_path(broker_id))
        assert stat is not None, f"broker {broker_id} is not registered"
        return stat.czxid

    def create_topic(self, replicas: list[int], leader: int, isr: list[int], min_insync: int) -> None:
        self.client.create(znodes.topic_config_path(TOPIC),
                           znodes.encode_topic_config({"min.insync.replicas": str(min_insync)}), makepath=True)
        self.client.create(znodes.topic_path(TOPIC), znodes.TopicAssignment(TOPIC, {0: replicas}).encode(),
                           makepath=True)
        self.client.create(znodes.partition_state_path(TOPIC, 0),
                           znodes.PartitionState(leader, 0, isr, 1).encode(), makepath=True)

    def state(self) -> znodes.PartitionState:
        data, stat = self.client.get(znodes.partition_state_path(TOPIC, 0))
        return znodes.PartitionState.decode(TOPIC, 0, data, stat.version, stat.mzxid)

    def elect(self, leader: int) -> None:
        current = self.state()
        self.client.set(znodes.partition_state_path(TOPIC, 0), znodes.PartitionState(
            leader, current.leader_epoch + 1, current.isr, 1).encode(), version=current.zk_version)

    def close(self) -> None:
        session.close(self.client)


@pytest.fixture
def controller(chroot):
    found = Controller(chroot)
    yield found
    found.close()


def test_leader_high_watermark_isr_and_resignation(chroot, controller, tmp_path):
    controller.create_topic([1, 2], leader=1, isr=[1, 2], min_insync=2)

    async def main():
        async with worker(chroot, tmp_path, lag_ms=LAG_MS) as parts:
            replicas, partitions = parts.replicas, parts.partitions
            await until(lambda: parts.leads(TOPIC, 0), "broker 1 to lead")
            epoch = controller.epoch(2)  # the follower's incarnation, which its fetches name

            # acks=all: answered once the follower's fetch shows it holds the batch
            appended = partitions.append(Append(TOPIC, 0, batch(3), acks=-1))
            assert appended.error == ErrorCode.none and appended.end_offset == 3
            located = partitions.locate(Locate(TOPIC, 0, 0, 1 << 20))
            assert located.high_watermark == 0 and located.path is None  # consumers see nothing yet
            waiting = asyncio.ensure_future(partitions.wait_replicated(WaitReplicated([(TOPIC, 0, 3)], 10_000)))
            await asyncio.sleep(0)
            assert not waiting.done()
            follower = parts.follower_fetch(TOPIC, 0, 0, 2, epoch)
            assert follower.size > 0  # a follower reads past the high watermark
            parts.follower_fetch(TOPIC, 0, 3, 2, epoch)  # its next fetch: it holds 0..2
            assert (await asyncio.wait_for(waiting, 5)).errors == [ErrorCode.none]
            assert partitions.bounds(PartitionBounds(TOPIC, 0)).high_watermark == 3

            # the follower stops fetching: after replica.lag.time.max.ms the ISR
            # shrinks in ZooKeeper, and acks=all is refused below min.insync.replicas
            for _ in range(3):
                partitions.append(Append(TOPIC, 0, batch(1)))
            await until(lambda: (replicas.tick(), controller.state().isr == [1])[1], "the ISR to shrink")
            await until(lambda: not isinstance(p := partitions.resolve(TOPIC, 0), ErrorCode) and p.isr_size() == 1,
                        "the leader to apply the shrink")
            refused = partitions.append(Append(TOPIC, 0, batch(1), acks=-1))
            assert refused.error == ErrorCode.not_enough_replicas
            assert partitions.bounds(PartitionBounds(TOPIC, 0)).high_watermark == 6  # an ISR of one: its own end

            # the follower catches up: it joins the ISR again
            parts.follower_fetch(TOPIC, 0, 6, 2, epoch)
            await until(lambda: controller.state().isr == [1, 2], "the ISR to grow back")

            # a pending acks=all is answered NOT_LEADER_OR_FOLLOWER when leadership moves
            appended = partitions.append(Append(TOPIC, 0, batch(1), acks=-1))
            waiting = asyncio.ensure_future(partitions.wait_replicated(
                WaitReplicated([(TOPIC, 0, appended.end_offset)], 10_000)))
            await asyncio.sleep(0)
            controller.elect(2)
            assert (await asyncio.wait_for(waiting, 5)).errors == [ErrorCode.not_leader_or_follower]
            assert partitions.append(Append(TOPIC, 0, batch(1))).error == ErrorCode.not_leader_or_follower
            assert partitions.locate(Locate(TOPIC, 0, 0, 100)).error == ErrorCode.not_leader_or_follower
            assert parts.role(TOPIC, 0) is Role.FOLLOWER  # now a follower of broker 2

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_restarted_follower_counts_nothing_from_before_and_rejoins_once_caught_up_again(chroot, controller,
                                                                                         tmp_path):
    """The follower restarts (its registration, so its broker epoch, is new),
    perhaps on an empty disk: its place in the ISR and its progress were the
    earlier incarnation's.  Out at once; back only with fetches of its own that
    reach the high watermark."""
    controller.create_topic([1, 2], leader=1, isr=[1, 2], min_insync=1)

    async def main():
        async with worker(chroot, tmp_path, lag_ms=60_000) as parts:
            replicas, partitions = parts.replicas, parts.partitions
            await until(lambda: parts.leads(TOPIC, 0), "broker 1 to lead")
            before = controller.epoch(2)
            partitions.append(Append(TOPIC, 0, batch(5)))
            parts.follower_fetch(TOPIC, 0, 5, 2, before)
            await until(lambda: partitions.bounds(PartitionBounds(TOPIC, 0)).high_watermark == 5,
                        "the follower to copy it all")
            leading = partitions.resolve(TOPIC, 0)
            assert not isinstance(leading, ErrorCode)

            after = controller.register(2)  # restarted with its disk wiped; it has not fetched yet
            await until(lambda: (replicas.tick(), controller.state().isr == [1])[1],
                        "the restarted follower to leave the ISR")
            parts.follower_fetch(TOPIC, 0, 5, 2, before)  # a fetch of the old one
            assert replicas.wanted_isr(leading) is None  # counts for nothing
            parts.follower_fetch(TOPIC, 0, 0, 2, after)  # the new one starts empty
            assert replicas.wanted_isr(leading) is None  # not in sync
            parts.follower_fetch(TOPIC, 0, 5, 2, after)
            await until(lambda: (replicas.tick(), controller.state().isr == [1, 2])[1],
                        "the new incarnation to rejoin once it holds the high watermark")

    asyncio.run(asyncio.wait_for(main(), 60))


def test_topic_deleted_removes_the_local_replica(chroot, controller, tmp_path):
    controller.create_topic([1, 2], leader=2, isr=[1, 2], min_insync=1)

    async def main():
        async with worker(chroot, tmp_path, lag_ms=LAG_MS) as parts:
            logs, replicas = parts.logs, parts.replicas
            await until(lambda: logs.get_log(TOPIC, 0) is not None, "the follower's log")
            assert parts.role(TOPIC, 0) is Role.FOLLOWER
            log = logs.get_log(TOPIC, 0)
            assert log is not None
            path = log.directory
            for node in (znodes.partition_state_path(TOPIC, 0), znodes.topic_path(TOPIC)):
                controller.client.delete(node, recursive=True)
            await until(lambda: logs.get_log(TOPIC, 0) is None, "the replica to go with its topic")
            assert (TOPIC, 0) not in replicas.partitions
            await until(lambda: not (tmp_path / path.rsplit("/", 1)[1]).exists(), "the directory to go")

    asyncio.run(asyncio.wait_for(main(), 60))
