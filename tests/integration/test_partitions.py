"""A four-partition topic spread over both workers: every keyed record lands on
the partition the client's partitioner chose, and is read back exactly once."""

import collections

from kafka.partitioner.default import murmur2

from hpbroker.server.ownership import partition_owner
from tests.integration.clients import ck_consume, ck_produce, kp_consume, kp_produce, topic_name
from tests.integration.conftest import module_broker

PARTITIONS = 4
broker = module_broker({"num.partitions": str(PARTITIONS)})


def _expected_partition(key: bytes) -> int:
    # Java's (and kafka-python's) default: murmur2 of the key, positive, mod n
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def test_keyed_records_spread_over_both_workers(broker):
    topic = topic_name("parts")
    owners = {partition_owner(topic, p, broker.num_workers) for p in range(PARTITIONS)}
    assert owners == set(range(broker.num_workers)), "the topic should touch every worker"

    ck_recs = [{"key": b"ck-%d" % i, "value": b"ck-value-%d" % i} for i in range(600)]
    kp_recs = [{"key": b"kp-%d" % i, "value": b"kp-value-%d" % i} for i in range(600)]
    # librdkafka's murmur2_random is the Java partitioner for keyed records
    ck_acks = ck_produce(broker.bootstrap, topic, ck_recs, partitioner="murmur2_random")
    kp_acks = kp_produce(broker.bootstrap, topic, kp_recs, enable_idempotence=False)

    expected = {}
    for recs, acks in ((ck_recs, ck_acks), (kp_recs, kp_acks)):
        for r, (partition, offset) in zip(recs, acks):
            assert partition == _expected_partition(r["key"]), r["key"]
            expected[(partition, offset)] = (r["key"], r["value"])
    assert len(expected) == 1200, "two records were acknowledged at the same offset"
    per_partition = collections.Counter(p for p, _ in expected)
    assert set(per_partition) == set(range(PARTITIONS))
    for p, n in per_partition.items():
        assert sorted(o for q, o in expected if q == p) == list(range(n)), f"partition {p} offsets have gaps"

    for consume in (ck_consume, kp_consume):
        got = consume(broker.bootstrap, topic, range(PARTITIONS), len(expected))
        positions = [(r.partition, r.offset) for r in got]
        assert len(positions) == len(set(positions)) == len(expected), consume.__name__
        assert {(r.partition, r.offset): (r.key, r.value) for r in got} == expected, consume.__name__
        assert all((broker.data_dir / f"{topic}-{p}").is_dir() for p in range(PARTITIONS))
