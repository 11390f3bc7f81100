"""A follower's fetcher against a real broker as its leader: truncation by
leader epoch, then the leader's batches appended as they are."""

import asyncio

from confluent_kafka import Producer

from hpbroker.replication.fetcher import FetcherSettings, ReplicaFetcher
from hpbroker.storage import Log, LogConfig, checkpoints
from tests.log_helpers import make_batch

TOPIC = "replicated"


def produce(broker, count, start=0):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(start, start + count):
        producer.produce(TOPIC, key=b"k%d" % i, value=b"v%d" % i)
        producer.poll(0)
    assert producer.flush(30) == 0


def topic_id(broker):
    """The topic's id, as the leader's partition.metadata holds it (the follower fetches by id)."""
    return checkpoints.read_partition_metadata(str(broker.data_dir / f"{TOPIC}-0" / "partition.metadata"))


def leader_log(broker):
    return Log.open(str(broker.data_dir / f"{TOPIC}-0"), TOPIC, 0, LogConfig())


async def follow_until(broker, follower, end, timeout=30):
    fetcher = ReplicaFetcher(FetcherSettings(broker_id=2, max_wait_ms=100, backoff_ms=100), 0, "127.0.0.1",
                             broker.port)
    progressed = asyncio.Event()
    fetcher.on_progress = lambda topic, partition: progressed.set()
    fetcher.follow(TOPIC, 0, 0, follower, topic_id(broker))
    try:
        while follower.log_end_offset < end:
            progressed.clear()
            await asyncio.wait_for(progressed.wait(), timeout)
    finally:
        await fetcher.close()


def test_a_follower_copies_the_leader_and_cuts_what_the_leader_never_had(broker_factory, tmp_path):
    broker = broker_factory()
    produce(broker, 50)
    follower = Log.open(str(tmp_path / f"{TOPIC}-0"), TOPIC, 0, LogConfig())
    asyncio.run(follow_until(broker, follower, 50))
    assert follower.high_watermark == 50
    # A tail the leader does not have, written in an epoch the leader never
    # knew (by this replica while it led, before it lost its place).
    follower.append(make_batch(5, tag="stray"), leader_epoch=1)
    assert follower.log_end_offset == 55
    produce(broker, 30, start=50)
    asyncio.run(follow_until(broker, follower, 80))
    broker.stop()
    leader = leader_log(broker)
    try:
        assert follower.log_end_offset == leader.log_end_offset == 80
        assert follower.read_records(0, 1 << 24) == leader.read_records(0, 1 << 24)
        assert follower.leader_epochs == leader.leader_epochs
    finally:
        leader.close()
        follower.close()
