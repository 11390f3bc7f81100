"""Produce (0): acks 0, 1 and all on a standalone broker, refused partitions
and batches, the legacy versions, what was appended read back, and produces
to a partition that fsyncs every message sharing their turn's fsync."""

import asyncio
import os

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.kernels import layout
from hpbroker.records import Record, compress, encode_message_set
from hpbroker.records.legacy import encode_message
from hpbroker.storage import stats
from hpbroker.workers.context import CloseConnection
from tests.handlers.conftest import (
    PRODUCE_KEY,
    batch,
    errors,
    fetch_request,
    produce_request,
    request,
    values_of,
)


def partitions_of(answer) -> list[tuple]:
    """(topic, partition, error name, base offset) of every partition answered."""
    return [(t.name, p.index, errors([p])[0], p.base_offset) for t in answer.responses for p in t.partition_responses]


@pytest.mark.parametrize("version", [3, 9])
def test_acks_1_appends_and_answers_the_base_offset(broker, version):
    broker.create_topic("t")
    first = broker.produce("t", 0, b"a", b"b", version=version)
    second = broker.produce("t", 0, b"c", version=version)
    assert (first.error_code, first.base_offset, second.base_offset) == (ErrorCode.none, 0, 2)
    assert first.log_append_time is None  # create time: no broker timestamp
    if version >= 5:
        assert second.log_start_offset == 0
    if version >= 8:
        assert second.record_errors == () and second.error_message is None
    assert broker.read("t") == (ErrorCode.none, [b"a", b"b", b"c"])


def test_acks_all_is_answered_at_once_by_the_only_replica(broker):
    broker.create_topic("t")
    answer = broker.produce("t", 0, b"safe", acks=-1)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    assert broker.read("t") == (ErrorCode.none, [b"safe"])


def test_acks_all_below_min_insync_replicas_is_refused_before_appending(broker):
    broker.create_topic("t", configs={"min.insync.replicas": "2"})
    assert broker.produce("t", 0, b"lost", acks=-1).error_code == ErrorCode.not_enough_replicas
    assert broker.produce("t", 0, b"kept", acks=1).error_code == ErrorCode.none  # only acks=all asks for replicas
    assert broker.read("t") == (ErrorCode.none, [b"kept"])


def test_acks_0_has_no_answer_but_appends(broker):
    broker.create_topic("t")
    assert broker.send(produce_request(9, "t", 0, batch(b"quiet"), acks=0)) is None
    assert broker.read("t") == (ErrorCode.none, [b"quiet"])


def test_a_failed_acks_0_produce_closes_the_connection(broker):
    broker.create_topic("t")
    with pytest.raises(CloseConnection, match="nowhere-0"):
        broker.send(produce_request(9, "nowhere", 0, batch(b"x"), acks=0))


@pytest.mark.parametrize("version", [3, 9])
def test_several_topics_and_partitions_answered_in_the_requests_order(broker, version):
    broker.create_topic("a", 2)
    broker.create_topic("b")
    answer = broker.send(request(PRODUCE_KEY, version, acks=1, timeout=5000, topic_data=[
        {"name": "a", "partition_data": [{"index": 1, "records": batch(b"1")}, {"index": 7, "records": batch(b"7")},
                                         {"index": 0, "records": batch(b"0", b"0")}]},
        {"name": "missing", "partition_data": [{"index": 0, "records": batch(b"m")}]},
        {"name": "b", "partition_data": [{"index": 0, "records": batch(b"b")}]}]))
    assert partitions_of(answer) == [("a", 1, "none", 0), ("a", 7, "unknown_topic_or_partition", -1),
                                     ("a", 0, "none", 0), ("missing", 0, "unknown_topic_or_partition", -1),
                                     ("b", 0, "none", 0)]
    assert broker.topics.get("missing") is None  # a produce creates no topic
    assert [broker.read(t, p)[1] for t, p in (("a", 0), ("a", 1), ("b", 0))] == [[b"0", b"0"], [b"1"], [b"b"]]


def test_invalid_acks(broker):
    broker.create_topic("t")
    assert broker.produce("t", 0, b"x", acks=2).error_code == ErrorCode.invalid_required_acks
    assert broker.read("t") == (ErrorCode.none, [])


@pytest.mark.parametrize("version", [3, 9])
def test_a_corrupt_batch_is_refused_and_nothing_appended(broker, version):
    broker.create_topic("t")
    damaged = bytearray(batch(b"payload"))
    damaged[-3] ^= 0xFF  # inside the records: the CRC no longer matches
    for records in (bytes(damaged), b"not a record batch"):
        answer = broker.send(produce_request(version, "t", 0, records))
        [(_, _, error, base_offset)] = partitions_of(answer)
        assert (error, base_offset) == ("corrupt_message", -1)
    assert broker.produce("t", 0, b"good", version=version).base_offset == 0
    assert broker.read("t") == (ErrorCode.none, [b"good"])


def test_log_append_time_is_answered_when_the_topic_stamps_it(broker):
    broker.create_topic("t", configs={"message.timestamp.type": "LogAppendTime"})
    answer = broker.produce("t", 0, b"x", version=9)
    assert answer.error_code == ErrorCode.none and answer.log_append_time is not None
    assert answer.log_append_time.timestamp() > 1_700_000_000


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_v2_produce_of_a_message_set(broker, magic):
    """librdkafka before 2.11.1 sends compressed message sets at Produce v0-v2."""
    broker.create_topic("old")
    records = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    message_set = encode_message_set(records, magic=magic, compression=layout.CODEC_GZIP)
    answer = broker.send(produce_request(3, "old", 0, message_set), version=2)
    assert partitions_of(answer) == [("old", 0, "none", 0)]
    assert broker.read("old") == (ErrorCode.none, [b"v0", b"v1", b"v2"])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", [layout.CODEC_NONE, layout.CODEC_SNAPPY])
@pytest.mark.parametrize("offsets", [(0, 0, 0), (7, 3, 9)])
def test_a_message_set_is_numbered_by_the_broker_whatever_offsets_it_carries(broker, magic, compression, offsets):
    """Sarama writes offset 0 for every message it produces, and Kafka's broker
    numbers a producer's records itself: a second produce follows the first."""
    broker.create_topic("old")
    for round_ in range(2):
        records = [Record(offset, 1_700_000_000_000, None, b"r%d-%d" % (round_, i)) for i, offset in enumerate(offsets)]
        # written by hand: the encoder takes increasing offsets only
        message_set = b"".join(encode_message(r.offset, r.key, r.value, magic=magic, timestamp=r.timestamp)
                               for r in records)
        if compression != layout.CODEC_NONE:
            message_set = encode_message(0, None, compress(compression, message_set), magic=magic,
                                         timestamp=1_700_000_000_000, attributes=compression)
        answer = broker.send(produce_request(3, "old", 0, message_set), version=2)
        assert partitions_of(answer) == [("old", 0, "none", 3 * round_)]
    assert broker.read("old") == (ErrorCode.none, [b"r%d-%d" % (r, i) for r in range(2) for i in range(3)])


@pytest.mark.parametrize("magic", [0, 1])
def test_a_message_set_at_v3_or_later_is_refused_as_kafka_does(broker, magic):
    """From v3 Kafka takes record batches only (INVALID_RECORD), and appends
    nothing of that partition."""
    broker.create_topic("t", partitions=2)
    message_set = encode_message_set([Record(0, 1_700_000_000_000, None, b"old")], magic=magic)
    answer = broker.send(request(PRODUCE_KEY, 3, acks=1, timeout=5000, topic_data=[
        {"name": "t", "partition_data": [{"index": 0, "records": message_set},
                                         {"index": 1, "records": batch(b"new")}]}]))
    assert partitions_of(answer) == [("t", 0, "invalid_record", -1), ("t", 1, "none", 0)]
    assert broker.read("t") == (ErrorCode.none, [])
    assert broker.read("t", 1) == (ErrorCode.none, [b"new"])


@pytest.mark.parametrize("version", [0, 1])
def test_the_oldest_versions_are_answered(broker, version):
    broker.create_topic("old")
    message_set = encode_message_set([Record(0, 1_700_000_000_000, None, b"v")], magic=version)
    answer = broker.send(produce_request(3, "old", 0, message_set), version=version)
    assert partitions_of(answer) == [("old", 0, "none", 0)]  # written in the v0/v1 layout
    missing = broker.send(produce_request(3, "gone", 0, message_set), version=version)
    assert partitions_of(missing) == [("gone", 0, "unknown_topic_or_partition", -1)]


@pytest.mark.parametrize("version", [3, 9])
def test_two_batches_for_one_partition_are_refused_as_kafka_does(broker, version):
    """From v3 a partition's records are one batch (Kafka's INVALID_RECORD
    otherwise), so its header speaks for all of it: a transactional batch
    cannot hide behind a plain one."""
    broker.create_topic("t")
    broker.create_topic("u")
    second = batch(b"hidden", producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    answer = broker.send(request(PRODUCE_KEY, version, acks=1, timeout=5000, topic_data=[
        {"name": "t", "partition_data": [{"index": 0, "records": batch(b"plain") + second}]},
        {"name": "u", "partition_data": [{"index": 0, "records": batch(b"alone")}]}]))
    assert partitions_of(answer) == [("t", 0, "invalid_record", -1), ("u", 0, "none", 0)]
    assert broker.read("t") == (ErrorCode.none, [])
    assert broker.read("u") == (ErrorCode.none, [b"alone"])


@pytest.mark.parametrize("version, error", [(3, "unsupported_compression_type"), (6, "unsupported_compression_type"),
                                            (7, "none"), (9, "none")])
def test_zstd_needs_produce_v7(broker, version, error):
    broker.create_topic("t")
    answer = broker.send(produce_request(version, "t", 0, batch(b"z" * 50, compression=layout.CODEC_ZSTD)))
    assert [e for _, _, e, _ in partitions_of(answer)] == [error]
    assert broker.read("t") == (ErrorCode.none, [b"z" * 50] if error == "none" else [])


# --- flush.messages: one fsync for a turn's produces ---------------------------------------------
class _Turns:
    """Stands in for the worker's loop where it gathers the turn's fsyncs: the
    test says when the turn ends."""

    def __init__(self):
        self.ends: list = []

    def call_soon(self, callback) -> None:
        self.ends.append(callback)

    def end(self) -> None:
        [callback] = self.ends
        self.ends.clear()
        callback()


async def _until(condition) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the produces never got that far")


@pytest.fixture
def flushing(make_broker, monkeypatch):
    """A broker whose topic "t" fsyncs every message, its turns ended by the test,
    and the segment fsyncs it made."""
    broker = make_broker({"log.flush.interval.messages": "1"})
    broker.create_topic("t")
    broker.partitions.resolve("t", 0)  # the log made (its first segment fsynced) before counting
    turns = _Turns()
    broker.partitions.group_flushes_on(turns)
    fsyncs: list = []
    monkeypatch.setattr(stats, "fsync_observer", fsyncs.append)
    return broker, turns, fsyncs


@pytest.mark.parametrize("acks", [1, -1])
def test_produces_to_a_partition_that_fsyncs_every_message_share_the_turns_fsync(flushing, acks):
    broker, turns, fsyncs = flushing

    log = broker.logs.get_log("t", 0)
    assert log is not None

    async def scenario():
        produces = [asyncio.ensure_future(broker.call(produce_request(9, "t", 0, batch(b"v%d" % i), acks=acks)))
                    for i in range(3)]
        await _until(lambda: log.written_offset == 3)
        for _ in range(100):  # every step the answers could take without the fsync
            await asyncio.sleep(0)
        assert not any(p.done() for p in produces), "no answer before the fsync"
        [t] = (await broker.call(fetch_request(12, [("t", 0, 0)]))).responses
        assert (t.partitions[0].high_watermark, values_of(t.partitions[0].records)) == (0, [])  # unseen yet
        assert fsyncs == []
        turns.end()
        return await asyncio.gather(*produces)

    answers = broker.run(scenario())
    assert sorted(partitions_of(a)[0][2:] for a in answers) == [("none", 0), ("none", 1), ("none", 2)]
    assert len(fsyncs) == 1, "one fsync for the three"
    assert broker.read("t") == (ErrorCode.none, [b"v0", b"v1", b"v2"])


def test_a_failed_fsync_fails_the_produces_waiting_for_it_and_the_records_stay_unseen(flushing, monkeypatch):
    broker, turns, _ = flushing
    real_fsync = os.fsync

    def failing(fd):
        raise OSError(5, "Input/output error")

    async def scenario():
        produce = asyncio.ensure_future(broker.call(produce_request(9, "t", 0, batch(b"maybe"))))
        await _until(lambda: turns.ends)
        monkeypatch.setattr(os, "fsync", failing)
        turns.end()
        return await produce

    answer = broker.run(scenario())
    assert partitions_of(answer)[0][2] == "kafka_storage_error"
    assert broker.read("t") == (ErrorCode.none, [])
    monkeypatch.setattr(os, "fsync", real_fsync)
    broker.tick()  # tries again, at the end of a turn
    turns.end()
    assert broker.read("t") == (ErrorCode.none, [b"maybe"])  # on disk now: seen (a retry answers its offset)
