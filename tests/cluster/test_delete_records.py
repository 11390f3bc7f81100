"""DeleteRecords on a replicated partition, through a real cluster and
confluent-kafka's AdminClient: the answer waits until every in-sync replica
has moved its log start (the follower tells its leader on its next fetch), so
a leader elected after the answer holds none of the deleted records either."""

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for

TOPIC = "trimmed"
RECORDS, CUT = 100, 60


def low_watermark(bootstrap: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, _high = consumer.get_watermark_offsets(ck.TopicPartition(TOPIC, 0), timeout=10)
        return low
    finally:
        consumer.close()


def test_records_deleted_on_a_leader_stay_deleted_once_it_dies(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
    cluster.wait_in_sync(TOPIC, 1)
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, b"%d" % i, partition=0)
    assert producer.flush(30) == 0

    futures = admin.delete_records([ck.TopicPartition(TOPIC, 0, CUT)], operation_timeout=30, request_timeout=40)
    deleted = next(iter(futures.values())).result(45)
    assert deleted.low_watermark == CUT

    leader = cluster.leader_of(TOPIC, 0)
    cluster.kill(leader)
    wait_for(lambda: cluster.leader_of(TOPIC, 0) not in (leader, -1), 60, "another replica to lead")
    cluster.wait_announced(TOPIC, 0, cluster.leader_of(TOPIC, 0))
    assert low_watermark(cluster.bootstrap) == CUT

    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "readers",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_BEGINNING)])
    try:
        first = None
        while first is None:
            message = consumer.poll(10)
            assert message is not None, "nothing to read after the cut"
            if message.error() is None:
                first = message
        assert (first.offset(), first.value()) == (CUT, b"%d" % CUT)
    finally:
        consumer.close()
