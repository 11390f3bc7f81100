"""OffsetForLeaderEpoch (23): the end offset of the largest leader epoch at or
below the one asked about (standalone: every record is of epoch 0)."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import OFFSET_FOR_LEADER_EPOCH, errors, flattened, grouped, request


def epoch_ends(broker, version: int, *asked):
    """(topic, partition, leader epoch[, current leader epoch]) each; [(topic, entity)]."""
    rows = ((t, p, {"leader_epoch": epoch, "current_leader_epoch": current[0] if current else -1})
            for t, p, epoch, *current in asked)
    answer = broker.send(request(OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1,
                                 topics=grouped(rows, topic_key="topic", partition_key="partition")))
    return flattened(answer.topics, name="topic")


def ends(found) -> list[tuple]:
    return [(p.leader_epoch, p.end_offset) for _topic, p in found]


@pytest.mark.parametrize("version", [2, 4])
def test_the_end_of_an_epoch(broker, version):
    broker.create_topic("t", 2)
    broker.produce("t", 0, b"a", b"b")
    broker.produce("t", 0, b"c")
    found = epoch_ends(broker, version, ("t", 0, 0), ("t", 0, 0, 0), ("t", 1, 0))
    assert errors(p for _t, p in found) == ["none", "none", "none"]
    # the latest epoch ends at the log end; an empty partition's leader holds epoch 0 from 0
    assert ends(found) == [(0, 3), (0, 3), (0, 0)]


@pytest.mark.parametrize("version", [2, 4])
def test_an_epoch_newer_than_any_known(broker, version):
    broker.create_topic("t")
    broker.produce("t", 0, b"a")
    [(_t, found)] = epoch_ends(broker, version, ("t", 0, 5))
    assert (found.error_code, found.leader_epoch, found.end_offset) == (ErrorCode.none, -1, -1)


@pytest.mark.parametrize("version", [2, 4])
def test_refusals(broker, version):
    broker.create_topic("t")
    found = epoch_ends(broker, version, ("t", 0, 0, 2), ("t", 4, 0), ("missing", 0, 0))
    assert [(t, p.partition) for t, p in found] == [("t", 0), ("t", 4), ("missing", 0)]
    assert errors(p for _t, p in found) == ["unknown_leader_epoch", "unknown_topic_or_partition",
                                            "unknown_topic_or_partition"]
    assert ends(found) == [(-1, -1)] * 3
