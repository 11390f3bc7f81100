"""DeleteRecords (21): a partition's log start moved up, and what readers see after."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import DELETE_RECORDS, LIST_OFFSETS, errors, flattened, grouped, request


def delete_records(broker, version: int, *asked):
    """(topic, partition, offset) each; [(topic, partition entity)]."""
    answer = broker.send(request(DELETE_RECORDS, version, timeout=5000,
                                 topics=grouped((t, p, {"offset": o}) for t, p, o in asked)))
    return flattened(answer.topics)


def earliest(broker, topic: str, partition: int = 0) -> int:
    answer = broker.send(request(LIST_OFFSETS, 8, replica_id=-1, topics=grouped([(topic, partition,
                                                                                  {"timestamp": -2})])))
    return answer.topics[0].partitions[0].offset


@pytest.fixture
def five(broker):
    """Offsets 0-4, one batch each."""
    broker.create_topic("t", 2)
    for value in (b"0", b"1", b"2", b"3", b"4"):
        broker.produce("t", 0, value)
    return broker


@pytest.mark.parametrize("version", [0, 2])
def test_records_below_an_offset_are_gone(five, version):
    [(topic, found)] = delete_records(five, version, ("t", 0, 3))
    assert (topic, found.partition_index, found.error_code, found.low_watermark) == ("t", 0, ErrorCode.none, 3)
    assert earliest(five, "t") == 3
    assert five.read("t", 0, offset=3) == (ErrorCode.none, [b"3", b"4"])
    assert five.read("t", 0, offset=0)[0] == ErrorCode.offset_out_of_range
    # moving it back down is no move: the answer is where it stands
    [(_t, again)] = delete_records(five, version, ("t", 0, 1))
    assert (again.error_code, again.low_watermark) == (ErrorCode.none, 3)


def test_minus_one_means_the_high_watermark(five):
    [(_t, found)] = delete_records(five, 2, ("t", 0, -1))
    assert (found.error_code, found.low_watermark) == (ErrorCode.none, 5)
    assert five.read("t", 0, offset=5) == (ErrorCode.none, [])
    assert five.produce("t", 0, b"5").base_offset == 5


@pytest.mark.parametrize("version", [0, 2])
def test_refusals(five, version):
    found = delete_records(five, version, ("t", 0, 6), ("t", 7, 0), ("t", 1, 0), ("missing", 0, 0))
    assert [(t, p.partition_index) for t, p in found] == [("t", 0), ("t", 7), ("t", 1), ("missing", 0)]
    assert errors(p for _t, p in found) == ["offset_out_of_range", "unknown_topic_or_partition", "none",
                                            "unknown_topic_or_partition"]
    assert [p.low_watermark for _t, p in found][1:] == [-1, 0, -1]
    assert earliest(five, "t") == 0
