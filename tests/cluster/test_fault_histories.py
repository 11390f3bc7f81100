"""Faults that broke cluster mode under a Jepsen-style run, each played with real
clients on brokers that each have a network of their own (tests.cluster.netlab),
and judged on the whole history (tests.cluster.history): every send recorded,
every partition read whole at the end, and no acknowledged record missing, no
value stored twice, every acknowledged offset holding its value, no offset read
with two values.

* a follower restarted on a wiped disk while cut off from the other brokers
  must not be taken back into the ISR on what its earlier incarnation fetched,
  so it can never be elected with less than was acknowledged;
* ZooKeeper killed and restarted: leaders keep taking acks=all writes through
  the outage, no ISR changes for it, and idempotent producers store nothing twice;
* a leader cut off from ZooKeeper alone: once the controller has replaced it,
  it learns so from the other brokers and its Metadata names the new leaders,
  so clients are not steered back to it;
* a worker stalled past half its session timeout (and past the whole of it):
  its leaderships wait for the session to be confirmed instead of refusing
  requests, and no follower leaves the ISR for the time nobody could measure.

Fault durations (a pause, an outage) are the schedule of the fault itself;
everything else waits on a condition.
"""

import asyncio
import os
import signal
import time
from collections import Counter

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from harness.broker import children
from harness.cluster import FAST, SESSION_MS, Cluster
from harness.waiting import wait_for
from hpbroker.replication.client import ClientConnection
from tests.cluster.history import ConsumerHistory, ProducerHistory, check, read_everything
from tests.cluster.lab_cluster import LabCluster

WAIT_S = 60
# librdkafka's own default: several requests in flight, so that a refusal in
# front of a pipelined request would show (as OUT_OF_ORDER_SEQUENCE_NUMBER, an
# epoch bump, and what was written stored again).
PIPELINED = {"max.in.flight.requests.per.connection": 5}


def lab(netlab, tmp_path, **overrides) -> LabCluster:
    cluster = LabCluster(netlab, tmp_path, overrides=overrides)
    cluster.start_all()
    return cluster


def create(cluster: Cluster, topic: str, partitions: int = 1, assignment=None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    spec = (NewTopic(topic, len(assignment), replica_assignment=assignment) if assignment
            else NewTopic(topic, partitions, 3))
    admin.create_topics([spec])[topic].result(30)
    cluster.wait_in_sync(topic, partitions)


def metadata_from(broker, topic: str) -> tuple[set[int], dict[int, int]]:
    """What ``broker`` itself answers: the live brokers it lists, and each partition's leader."""
    async def ask():
        connection = await ClientConnection.open(broker.host, broker.port, "fault-test", timeout=5)
        try:
            return await connection.send(MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),), allow_auto_topic_creation=False,
                include_topic_authorized_operations=False), timeout=5)
        finally:
            connection.close()
    response = asyncio.run(ask())
    (found,) = response.topics
    return {b.node_id for b in response.brokers}, {p.partition_index: p.leader_id for p in found.partitions}


def partitions_acked(producers: ProducerHistory, since: float) -> set[int | None]:
    return {send.partition for send in producers.acked_between(since)}


def assert_clean(cluster: Cluster, producers: ProducerHistory | list[ProducerHistory], consumer: ConsumerHistory,
                 topic: str,
                 partitions: int, netns=None):
    final = read_everything(cluster.bootstrap, topic, partitions, netns=netns)
    report = check(producers, final, consumer)
    assert report.valid, report.summary() + "\n" + getattr(cluster, "logs", lambda: "")()
    return report


def test_a_follower_restarted_on_a_wiped_disk_never_leads_with_less_than_was_acknowledged(netlab, tmp_path):
    # Kafka's default lag time: longer than the follower is away, so the progress
    # its earlier incarnation made still looks recent when it comes back.
    cluster = lab(netlab, tmp_path, **{"replica.lag.time.max.ms": "30000"})
    topic, leader, follower, third = "wiped", 1, 2, 3
    try:
        with cluster.inside_client():
            # the wiped follower comes before the third replica: the one an election would pick first
            create(cluster, topic, assignment=[[leader, follower, third]])
            before = ProducerHistory(cluster.bootstrap, topic, producers=1, partitions=1, rate=400, name="before")
            consumer = ConsumerHistory(cluster.bootstrap, topic, 1)
        after = None
        try:
            wait_for(before.progressed(2000), WAIT_S, "2000 acknowledged records")
            before.stop()  # the high watermark stays where the follower's last fetch found it
            cluster.kill(follower)
            dropped = wait_for(lambda: follower not in (state := cluster.state(topic, 0)).isr and state, WAIT_S,
                               f"the controller to drop broker {follower} from the ISR")
            cluster.wipe(follower)
            cluster.lab.cut(cluster.hosts[follower], cluster.hosts[leader])
            cluster.lab.cut(cluster.hosts[follower], cluster.hosts[third])
            cluster.start(follower)  # registered again, with nothing, and unable to fetch
            with cluster.inside_client():
                wait_for(lambda: follower in metadata_from(cluster.brokers[leader], topic)[0], WAIT_S,
                         f"the leader to know broker {follower}'s new registration")
                # the leader ticks, and hears broker 3's fetches, all along: each is a
                # chance to take broker 2 back on what its earlier incarnation fetched
                after = ProducerHistory(cluster.bootstrap, topic, producers=1, partitions=1, rate=400, name="after")
            wait_for(after.progressed(200), WAIT_S, "writes to go on")
            # not even for a moment (the state znode's version would tell)
            assert cluster.state(topic, 0) == dropped, f"the ISR changed: {cluster.state(topic, 0)}"

            cluster.kill(leader)
            elected = wait_for(lambda: cluster.state(topic, 0).leader not in (leader, -1) and
                               cluster.state(topic, 0).leader, WAIT_S, "a new leader")
            assert elected == third, f"broker {elected} leads: it has no copy of what was acknowledged"
            # alone in the ISR, below min.insync.replicas, until broker 2 has copied it all
            cluster.lab.heal()
            cluster.start(leader)
            cluster.wait_in_sync(topic, 1)
            wait_for(after.progressed(200), WAIT_S, "writes after the heal")
        finally:
            for history in (before, after, consumer):
                if history is not None:
                    history.stop()
        report = assert_clean(cluster, [h for h in (before, after) if h is not None], consumer, topic, 1,
                              cluster.client.netns)
        assert report.acked >= 2400
    finally:
        cluster.close()


def test_zookeeper_killed_and_restarted_stops_nothing_and_stores_nothing_twice(netlab, tmp_path):
    cluster = lab(netlab, tmp_path, **{"replica.lag.time.max.ms": "10000"})
    topic, partitions = "zk-outage", 6
    outage_s = 3 * SESSION_MS / 1000
    try:
        with cluster.inside_client():
            create(cluster, topic, partitions)
            producers = ProducerHistory(cluster.bootstrap, topic, producers=3, partitions=partitions, rate=100,
                                        config=PIPELINED)
            consumer = ConsumerHistory(cluster.bootstrap, topic, partitions)
        try:
            wait_for(producers.progressed(600), WAIT_S, "writes to be acknowledged")
            before = {p: cluster.state(topic, p) for p in range(partitions)}
            cluster.zk_kill()
            down = time.monotonic()
            wait_for(lambda: time.monotonic() - down >= outage_s, outage_s + 5, "three session timeouts of outage")
            cluster.zk_start()
            up = time.monotonic()
            wait_for(producers.progressed(600), WAIT_S, "writes after ZooKeeper is back")
            after = {p: cluster.state(topic, p) for p in range(partitions)}
        finally:
            producers.stop()
            consumer.stop()
        # acks=all went on through the outage, on every partition, nearly every second
        during = producers.acked_between(down, up)
        assert {send.partition for send in during} == set(range(partitions))
        seconds = Counter(int(send.done_at - down) for send in during if send.done_at is not None)  # acked: set
        assert sum(1 for s in range(int(up - down)) if seconds[s]) >= 0.8 * int(up - down), sorted(seconds.items())
        # nobody left an ISR, and no leader changed, for the time ZooKeeper was away
        assert {p: (s.leader, s.leader_epoch, s.isr, s.zk_version) for p, s in after.items()} == \
            {p: (s.leader, s.leader_epoch, s.isr, s.zk_version) for p, s in before.items()}
        assert_clean(cluster, producers, consumer, topic, partitions, cluster.client.netns)
    finally:
        cluster.close()


def test_a_leader_cut_off_from_zookeeper_alone_steps_down_and_names_the_new_leaders(netlab, tmp_path):
    cluster = lab(netlab, tmp_path)
    topic, partitions = "zk-cut", 3
    try:
        with cluster.inside_client():
            create(cluster, topic, partitions)
            producers = ProducerHistory(cluster.bootstrap, topic, producers=2, partitions=partitions, rate=100)
            consumer = ConsumerHistory(cluster.bootstrap, topic, partitions)
        try:
            wait_for(producers.progressed(300), WAIT_S, "writes to be acknowledged")
            cut = cluster.leader_of(topic, 0)
            cluster.lab.cut(cluster.hosts[cut], cluster.zk_host)  # it still reaches the brokers and clients
            wait_for(lambda: cluster.state(topic, 0).leader not in (cut, -1), WAIT_S,
                     f"the controller to replace broker {cut} once its session expired")
            replaced = time.monotonic()

            def steers_right() -> bool:
                current = {p: cluster.state(topic, p).leader for p in range(partitions)}
                with cluster.inside_client():
                    _live, named = metadata_from(cluster.brokers[cut], topic)
                return named == current
            wait_for(steers_right, WAIT_S, f"broker {cut}, cut off, to name the new leaders in its Metadata")
            wait_for(lambda: partitions_acked(producers, replaced + 1) == set(range(partitions)), WAIT_S,
                     "every partition to take writes again")
            cluster.lab.heal()
            cluster.wait_in_sync(topic, partitions)
            wait_for(producers.progressed(200), WAIT_S, "writes after the heal")
        finally:
            producers.stop()
            consumer.stop()
        assert_clean(cluster, producers, consumer, topic, partitions, cluster.client.netns)
        assert "another broker knows leader" in cluster.brokers[cut].log_text()
    finally:
        cluster.close()


def stall_twice(pid: int, producers: ProducerHistory) -> None:
    """SIGSTOP ``pid`` past half the session timeout, then past all of it; after
    each, until the producers' writes are acknowledged again."""
    for stall_s in (SESSION_MS / 1000 / 2 + 1, SESSION_MS / 1000 + 2):
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_for(lambda: time.monotonic() - stopped >= stall_s, stall_s + 5, "the stall")
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(producers.progressed(300), WAIT_S, f"writes to go on after a {stall_s:.0f} s stall")


def test_a_stalled_worker_waits_for_its_session_instead_of_refusing(zookeeper, chroot, tmp_path):
    """SIGSTOP of a leader's only worker, past half the session timeout and then
    past all of it (the broker's one session, the acceptor's, lives on; the
    worker doubts its leaderships until the acceptor confirms them): producers
    see a delay, no refusal, nothing twice."""
    cluster = Cluster(chroot, tmp_path, 3, overrides={**FAST, "min.insync.replicas": "2"})
    topic, partitions = "stalled", 3
    try:
        cluster.start_all()
        create(cluster, topic, partitions)
        producers = ProducerHistory(cluster.bootstrap, topic, producers=2, partitions=partitions, rate=100,
                                    config=PIPELINED)
        consumer = ConsumerHistory(cluster.bootstrap, topic, partitions)
        try:
            wait_for(producers.progressed(300), WAIT_S, "writes to be acknowledged")
            before = {p: cluster.state(topic, p) for p in range(partitions)}
            stalled = cluster.leader_of(topic, 0)
            leader = cluster.brokers[stalled]
            (worker,) = children(leader.pid)
            stall_twice(worker, producers)
            after = {p: cluster.state(topic, p) for p in range(partitions)}
        finally:
            producers.stop()
            consumer.stop()
        # no leadership moved; the stalled leader's ISRs were not touched (not shrunk for time it
        # could not measure, nor grown back): their states were not written.  (Where the stalled
        # worker follows, its leaders rightly drop it for as long as it does not fetch.)
        assert {p: (s.leader, s.leader_epoch) for p, s in after.items()} == \
            {p: (s.leader, s.leader_epoch) for p, s in before.items()}
        led = [p for p, s in before.items() if s.leader == stalled]
        assert {p: after[p] for p in led} == {p: before[p] for p in led}
        report = assert_clean(cluster, producers, consumer, topic, partitions)
        assert report.failed == 0
        assert "in doubt until the session is confirmed" in leader.log_text()  # the stall was noticed
    finally:
        cluster.close()


def test_a_stalled_acceptor_puts_its_workers_in_doubt_and_loses_nothing(zookeeper, chroot, tmp_path):
    """SIGSTOP of a leader's acceptor alone, the holder of the broker's one
    ZooKeeper session: past half the session timeout its workers stop trusting
    the session (its deadline on the board passed) and wait; past all of it
    the session expires and the controller moves the leaderships away.  Either
    way: nothing acknowledged lost, nothing stored twice."""
    cluster = Cluster(chroot, tmp_path, 3, overrides={**FAST, "min.insync.replicas": "2"})
    topic, partitions = "stalled-acceptor", 3
    try:
        cluster.start_all()
        create(cluster, topic, partitions)
        producers = ProducerHistory(cluster.bootstrap, topic, producers=2, partitions=partitions, rate=100,
                                    config=PIPELINED)
        consumer = ConsumerHistory(cluster.bootstrap, topic, partitions)
        try:
            wait_for(producers.progressed(300), WAIT_S, "writes to be acknowledged")
            leader = cluster.brokers[cluster.leader_of(topic, 0)]
            stall_twice(leader.pid, producers)
        finally:
            producers.stop()
            consumer.stop()
        report = assert_clean(cluster, producers, consumer, topic, partitions)
        assert report.failed == 0
        assert "the acceptor stopped renewing its hold on the ZooKeeper session" in leader.log_text()
    finally:
        cluster.close()
