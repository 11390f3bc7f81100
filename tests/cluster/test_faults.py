"""Faults a three-broker cluster meets, with real clients: a broker paused past
its ZooKeeper session, a follower's divergent tail, ZooKeeper restarted
under load, a controlled shutdown under load, kafka-python clients through
restarts, and a worker killed under load."""

import asyncio
import datetime
from pathlib import Path

import confluent_kafka as ck
import kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from harness.cluster import SESSION_MS, Cluster
from harness.waiting import wait_for
from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch, iter_batches
from hpbroker.replication.client import ClientConnection
from tests.cluster.test_failover import Producing


def create(cluster: Cluster, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)
    cluster.wait_in_sync(topic, partitions)


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 1,
                            "message.timeout.ms": 60000})
    failed = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda e, m: None if e is None else failed.append(e))
    assert producer.flush(90) == 0
    assert not failed, failed[:3]


def replica_values(broker_dir: Path, topic: str) -> list[bytes]:
    """The values a broker's replica of ``topic``-0 holds, read from its segment files."""
    values = []
    for segment in sorted((broker_dir / f"{topic}-0").glob("*.log")):
        for batch in iter_batches(segment.read_bytes(), allow_partial_tail=True):
            if not batch.header.is_control:
                values += [record.value for record in batch.records]
    return values


def raw_produce(topic: str, value: bytes) -> ProduceRequest:
    partition = PartitionProduceData(index=i32(0), records=Records(encode_batch([Record(0, 0, None, value)])))
    return ProduceRequest(transactional_id=None, acks=i16(1),
                          timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                          topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(partition,)),))


def test_a_broker_paused_past_its_session_takes_no_write_for_what_it_lost(cluster):
    """A producer that still believes in the old leader sends while it is
    paused; once continued the old leader must refuse, not append."""
    topic = "paused"
    create(cluster, topic)
    old = cluster.leader_of(topic, 0)
    broker = cluster.brokers[old]

    async def main():
        connection = await ClientConnection.open(broker.host, broker.port, "stale-producer")
        try:
            answer = await connection.send(raw_produce(topic, b"before"))
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
            await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(
                lambda: all(replica_values(b.data_dir, topic) == [b"before"] for b in cluster.brokers.values()),
                30, "every replica to copy the first record"))  # acks=1: only then is it safe from a leader change
            cluster.pause(old)
            await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(
                lambda: cluster.state(topic, 0).leader not in (old, -1), SESSION_MS / 1000 * 4,
                "another broker to lead once the paused one's session expired"))
            stale = asyncio.ensure_future(connection.send(raw_produce(topic, b"stale"), timeout=60))
            await asyncio.sleep(0)  # the request is written to the socket: it waits there for the broker
            cluster.resume(old)
            answer = await stale
            return answer.responses[0].partition_responses[0].error_code
        finally:
            connection.close()

    error = asyncio.run(main())
    assert error == ErrorCode.not_leader_or_follower, error
    cluster.wait_in_sync(topic, 1)  # the old leader came back as a follower
    produce(cluster.bootstrap, topic, [b"after"], acks="all")
    for broker_id, broker in cluster.brokers.items():
        wait_for(lambda: replica_values(broker.data_dir, topic) == [b"before", b"after"], 30,
                 f"broker {broker_id}'s replica to hold exactly what was acknowledged")


def test_a_divergent_tail_is_truncated_after_a_leader_change(cluster):
    """The leader takes acks=1 records its followers never copy, then dies; a
    follower leads; the old leader, back, cuts that tail (by leader epoch)
    and the three replicas end up identical."""
    topic = "diverging"
    create(cluster, topic)
    produce(cluster.bootstrap, topic, [b"shared-%d" % i for i in range(100)], acks="all")
    old = cluster.leader_of(topic, 0)
    followers = [b for b in cluster.brokers if b != old]
    for broker_id in followers:
        wait_for(lambda: len(replica_values(cluster.brokers[broker_id].data_dir, topic)) == 100, 30,
                 f"broker {broker_id} to copy the shared records")
    for broker_id in followers:
        cluster.pause(broker_id)
    try:
        # A paused follower may still receive the answer to the fetch it had
        # waiting at the leader (the kernel buffers it): one record answers
        # that fetch, so what comes after reaches no follower.
        produce(cluster.brokers[old].bootstrap, topic, [b"answers-a-waiting-fetch"], acks="1")
        produce(cluster.brokers[old].bootstrap, topic, [b"only-on-the-old-leader-%d" % i for i in range(50)],
                acks="1")
        cluster.kill(old)
    finally:
        for broker_id in followers:
            cluster.resume(broker_id)
    wait_for(lambda: cluster.state(topic, 0).leader in followers, SESSION_MS / 1000 * 4, "a follower to lead")
    new = cluster.state(topic, 0).leader
    produce(cluster.bootstrap, topic, [b"later-%d" % i for i in range(30)], acks="all")
    cluster.start(old)
    cluster.wait_in_sync(topic, 1)
    leaders = replica_values(cluster.brokers[new].data_dir, topic)
    assert not [v for v in leaders if v.startswith(b"only-on-the-old-leader")]
    assert [v for v in leaders if v != b"answers-a-waiting-fetch"] == \
        [b"shared-%d" % i for i in range(100)] + [b"later-%d" % i for i in range(30)]
    for broker_id, broker in cluster.brokers.items():
        wait_for(lambda: replica_values(broker.data_dir, topic) == leaders, 30,
                 f"broker {broker_id}'s replica to match the new leader's")


def test_zookeeper_restarted_under_load_loses_nothing(cluster, zookeeper):
    topic = "zk-restart"
    create(cluster, topic, 3)
    producing = Producing(cluster.bootstrap, topic)
    try:
        wait_for(producing.progressed(200), 60, "the producer to get going")
        zookeeper.restart()
        wait_for(producing.progressed(300), 60, "writes to carry on across the ZooKeeper restart")
        # A restart slower than the session timeout (a loaded host) expires the
        # brokers' sessions: they come back as new incarnations, out of the ISRs
        # until they have fetched again.  Only then can a killed leader be replaced.
        cluster.wait_in_sync(topic, 3)
        # the cluster still acts on failures: a leader killed now is replaced
        leader = cluster.leader_of(topic, 0)
        cluster.kill(leader)
        wait_for(lambda: cluster.state(topic, 0).leader not in (leader, -1), SESSION_MS / 1000 * 4,
                 "a new leader after the restart")
        wait_for(producing.progressed(300), 90, "writes to carry on without the killed leader")
    finally:
        producing.stop()
    assert not producing.failed, producing.failed[:5]


def test_a_controlled_shutdown_under_load_fails_no_delivery(cluster):
    topic = "controlled"
    create(cluster, topic, 3)
    producing = Producing(cluster.bootstrap, topic)
    try:
        wait_for(producing.progressed(200), 60, "the producer to get going")
        leader = cluster.leader_of(topic, 0)
        cluster.stop(leader)  # SIGTERM: leaderships move away first; a clean exit is asserted
        assert all(cluster.state(topic, p).leader != leader for p in range(3))
        wait_for(producing.progressed(300), 60, f"writes to carry on after broker {leader} stopped")
        cluster.start(leader)
        cluster.wait_in_sync(topic, 3)
        wait_for(producing.progressed(300), 60, f"writes to carry on after broker {leader} returned")
    finally:
        producing.stop()
    assert not producing.failed, producing.failed[:5]


def test_kafka_python_clients_carry_on_through_a_leader_restart(cluster):
    """kafka-python (no leader epochs in its fetches) through SIGKILL and SIGTERM
    restarts of the leader: every acknowledged record is consumed by its group."""
    topic = "kafka-python"
    create(cluster, topic, 2)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=20,
                                   retry_backoff_ms=200, reconnect_backoff_max_ms=500, request_timeout_ms=30000)
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="kp-group",
                                   auto_offset_reset="earliest", reconnect_backoff_max_ms=500,
                                   metadata_max_age_ms=1000)
    acked, seen = set(), set()

    def send(prefix: str, count: int) -> None:
        futures = [(b"%s-%d" % (prefix.encode(), i), producer.send(topic, b"%s-%d" % (prefix.encode(), i)))
                   for i in range(count)]
        for value, future in futures:
            future.get(timeout=90)
            acked.add(value)

    def consumed_all() -> bool:
        for records in consumer.poll(200).values():
            seen.update(r.value for r in records)
        return acked <= seen

    try:
        send("before", 200)
        wait_for(consumed_all, 60, "the kafka-python group to read the first records")
        for how in ("kill", "stop"):
            leader = cluster.leader_of(topic, 0)
            getattr(cluster, how)(leader)
            send(f"without-{leader}-{how}", 200)
            cluster.start(leader)
            cluster.wait_in_sync(topic, 2)
            send(f"after-{how}", 200)
            wait_for(consumed_all, 90, f"the group to read what was produced around the {how} of broker {leader}")
    finally:
        producer.close(10)
        consumer.close()


def test_a_worker_killed_under_load_loses_nothing(zookeeper, chroot, tmp_path):
    """Two workers per broker: the leader's worker owning the partition dies;
    the acceptor restarts it, it takes its roles again from the cluster board."""
    cluster = Cluster(chroot, tmp_path, 3, overrides={"min.insync.replicas": "2", "num.workers": "2"})
    try:
        cluster.start_all()
        topic = "worker-kill"
        create(cluster, topic, 4)
        producing = Producing(cluster.bootstrap, topic)
        try:
            wait_for(producing.progressed(200), 60, "the producer to get going")
            leader = cluster.brokers[cluster.leader_of(topic, 0)]
            for index in sorted(leader.worker_pids()):
                leader.kill_worker(index)
                wait_for(producing.progressed(300), 90, f"writes to carry on after worker {index} was killed")
            cluster.wait_in_sync(topic, 4)
        finally:
            producing.stop()
        assert not producing.failed, producing.failed[:5]
    finally:
        cluster.close()
