"""DescribeProducers (61): the active producers of each partition, as its
leader keeps them, including the first offset of an open transaction."""

from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch
from tests.handlers.conftest import request

DESCRIBE_PRODUCERS = 61


def describe(broker, topic: str, *partitions: int):
    answer = broker.send(request(DESCRIBE_PRODUCERS, 0, topics=[{"name": topic, "partition_indexes": partitions}]))
    [t] = answer.topics
    assert t.name == topic
    return {p.partition_index: p for p in t.partitions}


def test_a_partitions_producers_with_their_open_transactions(broker):
    broker.create_topic("t", 2)
    broker.produce("t", 0, b"plain")  # no producer id: not listed
    partition = broker.partitions.resolve("t", 0)
    assert not isinstance(partition, ErrorCode)
    idempotent = encode_batch([Record(0, 1_700_000_000_000, None, b"i")], producer_id=11, producer_epoch=2,
                              base_sequence=0)
    transactional = encode_batch([Record(i, 1_700_000_000_001, None, b"x") for i in range(3)], producer_id=12,
                                 producer_epoch=0, base_sequence=0, transactional=True)
    partition.log.append(idempotent)  # 1
    partition.log.append(transactional)  # 2-4
    found = describe(broker, "t", 0, 1, 7)
    assert [found[i].error_code for i in (0, 1, 7)] == [ErrorCode.none, ErrorCode.none,
                                                        ErrorCode.unknown_topic_or_partition]
    producers = {p.producer_id: p for p in found[0].active_producers}
    assert set(producers) == {11, 12} and found[1].active_producers == ()
    assert (producers[11].producer_epoch, producers[11].last_sequence, producers[11].last_timestamp,
            producers[11].current_txn_start_offset) == (2, 0, 1_700_000_000_000, -1)
    assert (producers[12].last_sequence, producers[12].current_txn_start_offset) == (2, 2)


def test_an_unknown_topic(broker):
    found = describe(broker, "missing", 0)
    assert found[0].error_code == ErrorCode.unknown_topic_or_partition
