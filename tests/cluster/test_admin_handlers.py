"""The replica admin handlers in cluster mode, called directly on a worker's
view of a real ZooKeeper (its ``SharedLink`` to the broker's session, its
``ClusterTopics`` and ``ImageView``, as the worker wires them) with real controllers deciding:
ElectLeaders waits for the elections it asked for, AlterPartitionReassignments
and ListPartitionReassignments write and read the topic znodes, and an admin
write waiting on a ZooKeeper that went away leaves the worker's loop serving.
(Through a broker's sockets once the multi-broker harness exists.)"""

import asyncio
import datetime
import importlib
import time
from types import SimpleNamespace

from kio.schema.types import ProducerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from harness.waiting import until
from harness.zookeeper import ZooKeeperServer
from hpbroker.cluster import znodes
from hpbroker.errors import ErrorCode
from hpbroker.protocol.schemas import request_type
from hpbroker.storage.config import LogConfig
from hpbroker.workers.authorization import Access
from hpbroker.workers.cluster_topics import ClusterTopics
from hpbroker.workers.cluster_view import BrokerNode, ImageView
from hpbroker.workers.handlers import ROUTES
from hpbroker.workers.producer_ids import ClusterProducerIds
from tests.cluster.members import WAIT_S, LentSession, Member, set_isr, state, wait_state

CREATE, INIT_PRODUCER_ID, ELECT, ALTER, LIST = 19, 22, 43, 45, 46


def kio(api_key: int, version: int):
    return importlib.import_module(request_type(api_key, version).__module__)


async def worker_view(chroot, tmp_path):
    """What a worker of broker 1 hands its handlers in cluster mode."""
    lent = LentSession(chroot)
    link = lent.link
    topics = ClusterTopics([str(tmp_path)], LogConfig(), link, default_replication_factor=2,
                           offsets_replication_factor=2)
    view = ImageView(BrokerNode(1, "127.0.0.1", 19001))

    def on_image(image):
        topics.apply(image)
        view.image = image
    on_image(link.image())
    link.publish_to(on_image, lambda session: on_image(link.image()))
    return SimpleNamespace(cluster=view, topics=topics, identity=SimpleNamespace(broker_id=1), access=Access(),
                           producer_ids=ClusterProducerIds(link, 1)), lent


async def call(ctx, api_key: int, version: int, request):
    return await ROUTES[api_key](ctx, SimpleNamespace(api_version=version), request)


def elect_request(election_type: int, partitions, timeout_s: float = WAIT_S):
    m = kio(ELECT, 2)
    topics = None if partitions is None else tuple(
        m.TopicPartitions(topic=topic, partitions=tuple(i32(p) for p in ps)) for topic, ps in partitions.items())
    return m.ElectLeadersRequest(election_type=i8(election_type), topic_partitions=topics,
                                 timeout=i32Timedelta.parse(datetime.timedelta(seconds=timeout_s)))


def codes(response) -> dict:
    return {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
            for p in r.partition_result}


def test_elect_leaders_in_a_cluster(start_members, admin, chroot, tmp_path):
    members = start_members(1, 2)
    admin.create(znodes.topic_path("t"), znodes.TopicAssignment("t", {0: [1, 2], 1: [2, 1], 2: [1, 2]}).encode())
    for p in (0, 1, 2):
        wait_state(admin, "t", p, "leaders", lambda s: s.isr == [1, 2] or s.isr == [2, 1])
    members[1].crash(chroot)
    for p in (0, 2):
        wait_state(admin, "t", p, "broker 2 to lead", lambda s: s.leader == 2)
    start_members(1)
    set_isr(admin, "t", 0, [2, 1])  # broker 1 caught up on partition 0, not on partition 2

    async def main():
        ctx, lent = await worker_view(chroot, tmp_path)
        try:
            await until(lambda: ctx.cluster.image.live == {1, 2} and 1 in ctx.cluster.image.states[("t", 0)].isr,
                        "the worker's image to show broker 1 back in sync")
            response = await call(ctx, ELECT, 2, elect_request(0, {"t": [0, 1, 2, 7], "nope": [0]}))
            assert response.error_code == ErrorCode.none
            assert codes(response) == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.election_not_needed,
                                       ("t", 2): ErrorCode.preferred_leader_not_available,
                                       ("t", 7): ErrorCode.unknown_topic_or_partition,
                                       ("nope", 0): ErrorCode.unknown_topic_or_partition}
            elected = state(admin, "t", 0)
            assert elected is not None and elected.leader == 1  # answered once elected
            # all partitions: only those elected or failed are listed
            response = await call(ctx, ELECT, 2, elect_request(0, None))
            assert codes(response) == {("t", 2): ErrorCode.preferred_leader_not_available}
            # unclean: every partition has a live leader
            response = await call(ctx, ELECT, 1, elect_request(1, {"t": [0]}))
            assert codes(response) == {("t", 0): ErrorCode.election_not_needed}
        finally:
            lent.close()

    asyncio.run(main())


def test_alter_and_list_reassignments_in_a_cluster(start_members, admin, chroot, tmp_path):
    start_members(1, 2, 3)
    admin.create(znodes.topic_path("t"), znodes.TopicAssignment("t", {0: [1, 2], 1: [2, 3]}).encode())
    wait_state(admin, "t", 0, "a leader", lambda s: s.isr == [1, 2])
    alter, listing = kio(ALTER, 1), kio(LIST, 0)

    def alter_request(changes: dict, allow: bool = True):
        return alter.AlterPartitionReassignmentsRequest(allow_replication_factor_change=allow, topics=tuple(
            alter.ReassignableTopic(name=topic, partitions=tuple(alter.ReassignablePartition(
                partition_index=i32(p), replicas=None if r is None else tuple(i32(b) for b in r))
                for p, r in parts.items())) for topic, parts in changes.items()))

    async def main():
        ctx, lent = await worker_view(chroot, tmp_path)
        try:
            await until(lambda: ctx.cluster.image.live == {1, 2, 3}, "the worker's image to list every broker")
            response = await call(ctx, ALTER, 1, alter_request({"t": {0: [3, 2], 1: [2, 3, 1]}}, allow=False))
            assert response.error_code == ErrorCode.none and response.allow_replication_factor_change is False
            assert [(p.partition_index, p.error_code) for t in response.responses for p in t.partitions] == [
                (0, ErrorCode.none), (1, ErrorCode.invalid_replication_factor)]

            response = await call(ctx, LIST, 0, listing.ListPartitionReassignmentsRequest(topics=None))
            assert [(t.name, p.partition_index, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                    for t in response.topics for p in t.partitions] == [("t", 0, [3, 2, 1], [3], [1])]
            response = await call(ctx, LIST, 0, listing.ListPartitionReassignmentsRequest(topics=(
                listing.ListPartitionReassignmentsTopics(name="t", partition_indexes=(i32(1),)),)))
            assert response.topics == ()

            response = await call(ctx, ALTER, 0, kio(ALTER, 0).AlterPartitionReassignmentsRequest(topics=(
                kio(ALTER, 0).ReassignableTopic(name="t", partitions=(
                    kio(ALTER, 0).ReassignablePartition(partition_index=i32(0), replicas=None),)),)))
            assert [p.error_code for t in response.responses for p in t.partitions] == [ErrorCode.none]
            response = await call(ctx, LIST, 0, listing.ListPartitionReassignmentsRequest(topics=None))
            assert response.topics == ()
        finally:
            lent.close()

    asyncio.run(main())


def test_an_admin_write_waiting_on_zookeeper_leaves_the_loop_serving(tmp_path):
    """CreateTopics and InitProducerId against a ZooKeeper that went away:
    while both wait (kazoo queues the writes until it reconnects), a timer on
    the worker's loop keeps firing on time; when the admin timeout is up each
    request is answered with its one-line error, both at once."""
    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    member = Member(server.connect, 1)
    create = kio(CREATE, 4)

    async def main():
        ctx, lent = await worker_view(server.connect, tmp_path)
        try:
            lent.link.admin.timeout_s = 1.5
            await until(lambda: ctx.cluster.image.live == {1}, "the worker's image to list broker 1")
            server.kill()
            client = lent.client
            assert client is not None
            await until(lambda: not client.connected, "the worker to notice ZooKeeper is gone")

            gaps, last = [], time.monotonic()

            async def ticker():
                nonlocal last
                while True:
                    await asyncio.sleep(0.02)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now
            ticking = asyncio.create_task(ticker())
            started = time.monotonic()
            created, initialized = await asyncio.gather(
                call(ctx, CREATE, 4, create.CreateTopicsRequest(topics=(create.CreatableTopic(
                    name=TopicName("t"), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                    configs=()),), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False)),
                call(ctx, INIT_PRODUCER_ID, 4, kio(INIT_PRODUCER_ID, 4).InitProducerIdRequest(
                    transactional_id=None, transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
                    producer_id=ProducerId(-1), producer_epoch=i16(-1))))
            elapsed = time.monotonic() - started
            ticking.cancel()

            assert 1.4 < elapsed < 3.0  # the two waited side by side, each for the admin timeout
            assert len(gaps) > 30 and max(gaps) < 0.5, f"the loop stalled for {max(gaps):.2f} s"
            [result] = created.topics
            assert result.error_code == ErrorCode.request_timed_out
            assert result.error_message == "topic 't': ZooKeeper did not answer within 1.5 s"
            assert (initialized.error_code, initialized.producer_id) == (ErrorCode.coordinator_not_available, -1)
        finally:
            lent.close()

    try:
        asyncio.run(main())
    finally:
        server.start()  # for the member to leave cleanly
        member.leave()
        server.stop()
