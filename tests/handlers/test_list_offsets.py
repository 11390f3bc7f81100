"""ListOffsets (2): earliest, latest, by time and max timestamp; earliest and
latest from the shared partition table, the others by the partition's owner."""

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.records.control import COMMIT
from hpbroker.shared.partition_table import STANDALONE
from hpbroker.storage.log import ORIGIN_COORDINATOR
from hpbroker.workers.owner_calls import DeletePartition, DeleteRecords
from tests.handlers.conftest import LIST_OFFSETS, errors, flattened, grouped, request

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
T = 1_700_000_000_000


def list_offsets(broker, version: int, *asked, leader_epoch: int = -1, isolation_level: int = 0):
    """(topic, partition, timestamp) each; [(topic, partition entity)]."""
    answer = broker.send(request(LIST_OFFSETS, version, replica_id=-1, timeout=5000, isolation_level=isolation_level,
                                 topics=grouped((t, p, {"timestamp": ts, "current_leader_epoch": leader_epoch})
                                                for t, p, ts in asked)))
    return flattened(answer.topics)


def offsets(found) -> list[tuple]:
    return [(p.offset, p.timestamp) for _topic, p in found]


@pytest.fixture
def timed(broker):
    """Offsets 0-3 at T, T+30 (the largest), T+10, T+20, one batch each."""
    broker.create_topic("t")
    for value, ts in ((b"a", T), (b"b", T + 30), (b"c", T + 10), (b"d", T + 20)):
        broker.produce("t", 0, value, timestamps=[ts])
    return broker


@pytest.mark.parametrize("version", [1, 8])
def test_earliest_and_latest(timed, version):
    found = list_offsets(timed, version, ("t", 0, EARLIEST), ("t", 0, LATEST))
    assert errors(p for _t, p in found) == ["none", "none"]
    assert offsets(found) == [(0, -1), (4, -1)]
    if version >= 4:
        assert [p.leader_epoch for _t, p in found] == [0, 0]


@pytest.mark.parametrize("version", [1, 8])
def test_an_empty_partition(broker, version):
    broker.create_topic("empty")
    assert offsets(list_offsets(broker, version, ("empty", 0, EARLIEST), ("empty", 0, LATEST))) == [(0, -1), (0, -1)]


@pytest.mark.parametrize("version", [1, 8])
def test_the_first_offset_at_or_after_a_time(timed, version):
    found = list_offsets(timed, version, ("t", 0, T), ("t", 0, T + 5), ("t", 0, T + 25), ("t", 0, T + 31))
    # T+5 finds offset 1 (T+30): the first record at or after it in offset order
    assert offsets(found) == [(0, T), (1, T + 30), (1, T + 30), (-1, -1)]


@pytest.mark.parametrize("version", [7, 11])
def test_the_max_timestamp(timed, version):
    [(_t, found)] = list_offsets(timed, version, ("t", 0, MAX_TIMESTAMP))
    assert (found.error_code, found.offset, found.timestamp) == (ErrorCode.none, 1, T + 30)


@pytest.mark.parametrize("version", [1, 8])
def test_unknown_topics_and_partitions(timed, version):
    found = list_offsets(timed, version, ("t", 0, LATEST), ("t", 1, LATEST), ("missing", 0, EARLIEST))
    assert [(t, p.partition_index) for t, p in found] == [("t", 0), ("t", 1), ("missing", 0)]
    assert errors(p for _t, p in found) == ["none", "unknown_topic_or_partition", "unknown_topic_or_partition"]
    assert offsets(found)[1:] == [(-1, -1), (-1, -1)]
    assert timed.topics.get("missing") is None


def test_a_leader_epoch_newer_than_the_partitions_is_refused(timed):
    [(_t, found)] = list_offsets(timed, 8, ("t", 0, LATEST), leader_epoch=3)
    assert found.error_code == ErrorCode.unknown_leader_epoch


def test_earliest_and_latest_are_read_from_the_shared_table(timed):
    """What the table says is what the client hears: it is not the owner that answers."""
    writer = timed.memory.partitions.writer(0)
    writer.publish("t", 0, STANDALONE, True, 0, 1, 3, 3, 3)  # as if the owner had published these
    assert offsets(list_offsets(timed, 8, ("t", 0, EARLIEST), ("t", 0, LATEST))) == [(1, -1), (3, -1)]
    # a time is looked up by the owner in its index
    assert offsets(list_offsets(timed, 8, ("t", 0, T + 5))) == [(1, T + 30)]


def test_what_moves_the_log_start_and_end_is_published_at_once(timed):
    timed.produce("t", 0, b"e")
    timed.run(timed.local_owner.call(DeleteRecords("t", 0, 2, 5000)))
    assert offsets(list_offsets(timed, 8, ("t", 0, EARLIEST), ("t", 0, LATEST))) == [(2, -1), (5, -1)]
    published = timed.memory.partitions.reader().read("t", 0)
    assert published is not None and (published.log_start, published.high_watermark) == (2, 5)


def test_a_deleted_partition_is_no_longer_published(timed):
    assert timed.memory.partitions.reader().read("t", 0) is not None
    timed.run(timed.local_owner.call(DeletePartition("t", 0)))
    assert timed.memory.partitions.reader().read("t", 0) is None


def test_latest_for_read_committed_is_the_last_stable_offset(timed):
    partition = timed.partitions.resolve("t", 0)
    assert not isinstance(partition, ErrorCode)
    partition.log.append(encode_batch([Record(0, T, None, b"x")], producer_id=7, producer_epoch=0, base_sequence=0,
                                      transactional=True))  # 4, left open
    timed.produce("t", 0, b"y")  # 5
    for published in (True, False):  # from the table, and from the owner (a table entry being rewritten)
        if not published:
            timed.memory.partitions.writer(0).withdraw("t", 0)
        assert offsets(list_offsets(timed, 8, ("t", 0, LATEST), isolation_level=1)) == [(4, -1)]
        assert offsets(list_offsets(timed, 8, ("t", 0, LATEST))) == [(6, -1)]
    partition.log.append(encode_control_batch(COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0),
                         origin=ORIGIN_COORDINATOR)
    assert offsets(list_offsets(timed, 8, ("t", 0, LATEST), isolation_level=1)) == [(7, -1)]
