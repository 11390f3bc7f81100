"""A follower's log: the leader's batches kept as they are, a divergent tail cut."""

import pytest

from hpbroker.records import Record, encode_batch
from hpbroker.storage import Log, LogConfig, OffsetOutOfRangeError
from tests.log_helpers import make_batch, read_all


def open_log(path, name="events"):
    return Log.open(str(path / f"{name}-0"), name, 0, LogConfig())


def idempotent_batch(count, producer_id, first_seq):
    records = [Record(offset=i, timestamp=1, key=b"k", value=b"v") for i in range(count)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=first_seq)


@pytest.fixture
def leader(tmp_path):
    log = open_log(tmp_path / "leader")
    log.append(make_batch(3), leader_epoch=0)
    log.append(make_batch(2), leader_epoch=0)
    log.append(make_batch(4), leader_epoch=2)
    yield log
    log.close()


def test_the_follower_holds_the_leaders_bytes_offsets_and_epochs(tmp_path, leader):
    follower = open_log(tmp_path / "follower")
    data = leader.read_records(0, 1 << 20)
    assert follower.append_as_follower(data) == 9
    assert follower.read_records(0, 1 << 20) == data
    assert follower.leader_epochs == leader.leader_epochs == [(0, 0), (2, 5)]
    follower.close()
    reopened = open_log(tmp_path / "follower")
    assert reopened.log_end_offset == 9 and reopened.leader_epochs == [(0, 0), (2, 5)]
    reopened.close()


def test_a_batch_cut_off_at_the_end_of_a_response_waits_for_the_next_fetch(tmp_path, leader):
    follower = open_log(tmp_path / "follower")
    data = leader.read_records(0, 1 << 20)
    assert follower.append_as_follower(data[:-10]) == 5
    assert follower.append_as_follower(leader.read_records(5, 1 << 20)) == 9
    assert [r.offset for r in read_all(follower)] == list(range(9))
    with pytest.raises(OffsetOutOfRangeError):
        follower.append_as_follower(leader.read_records(3, 1 << 20))  # not where the follower ends
    follower.close()


def test_truncation_cuts_records_epochs_and_producer_state_and_lasts(tmp_path):
    log = open_log(tmp_path / "replica")
    log.append(idempotent_batch(2, 7, 0), leader_epoch=1)
    log.append(idempotent_batch(2, 7, 2), leader_epoch=3)  # written by a leader that then lost its place
    log.high_watermark = 4
    log.truncate_to(2)
    assert log.log_end_offset == 2 and log.high_watermark == 2
    assert log.leader_epochs == [(1, 0)]
    # the producer's next sequence is 2 again: its retry lands where the new leader has it
    assert log.append(idempotent_batch(2, 7, 2), leader_epoch=4).first_offset == 2
    log.close()
    reopened = open_log(tmp_path / "replica")
    assert reopened.log_end_offset == 4 and reopened.leader_epochs == [(1, 0), (4, 2)]
    reopened.close()


def test_truncation_removes_whole_segments_above_the_point(tmp_path):
    log = open_log(tmp_path / "replica")
    for epoch in range(4):
        log.append(make_batch(5), leader_epoch=epoch)
        log.roll()
    log.truncate_to(7)  # inside the second segment's batch: the whole batch goes
    assert log.log_end_offset == 5
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert log.leader_epochs == [(0, 0)]
    log.truncate_to(100)  # beyond the end: nothing to do
    assert log.log_end_offset == 5
    log.close()


def test_a_lone_replicas_high_watermark_is_everything_written(tmp_path):
    log = open_log(tmp_path / "alone")
    log.append(make_batch(3))
    assert log.high_watermark == 3
    log.high_watermark = 1
    assert log.high_watermark == 1
    log.close()


def test_a_follower_follows_the_leaders_log_start_up_to_its_high_watermark(tmp_path):
    leader = open_log(tmp_path / "leader")
    for _ in range(4):
        leader.append(make_batch(5), leader_epoch=0)
        leader.roll()
    follower = open_log(tmp_path / "follower")
    while follower.log_end_offset < leader.log_end_offset:  # one segment per fetch (one leader segment)
        follower.append_as_follower(leader.read_records(follower.log_end_offset, 1 << 20))
        follower.roll()
    follower.high_watermark = 12
    leader.delete_records_before(17)
    assert follower.follow_leader_log_start(leader.log_start_offset) == 12  # not past its own high watermark
    assert [s.base_offset for s in follower.segments] == [10, 15, 20]  # whole segments below it went
    with pytest.raises(OffsetOutOfRangeError):
        follower.read(11, 100)
    follower.high_watermark = 20
    assert follower.follow_leader_log_start(leader.log_start_offset) == 17
    assert [s.base_offset for s in follower.segments] == [15, 20]
    assert follower.follow_leader_log_start(3) == 17  # never backwards
    assert [r.offset for r in read_all(follower)] == [17, 18, 19]
    follower.close()
    leader.close()
