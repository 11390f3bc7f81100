"""Fetch (1): the answer as a consumer reads it (pieces joined, record bytes
read from the segment files): data, limits, errors, and the long poll."""

import asyncio
import os
import time
import uuid

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.protocol import client_codec
from hpbroker.protocol.codec import decode_request
from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.records.control import ABORT
from hpbroker.storage.log import ORIGIN_COORDINATOR
from hpbroker.workers.fetch_response import FileRegion
from hpbroker.workers.handlers import ROUTES
from hpbroker.workers.handlers.fetch import API_KEY as FETCH_KEY, SMALL_RECORDS_BYTES, published_locate
from tests.handlers.conftest import batch, errors, fetch_request, produce_request, records_of, until, values_of
from tests.handlers.test_delete_records import delete_records

BY_NAME, BY_ID = (4, 12), (13, 16)


def partitions_of(answer) -> list:
    return [p for t in answer.responses for p in t.partitions]


@pytest.mark.parametrize("version", BY_NAME + BY_ID)
def test_records_from_an_offset(broker, version):
    broker.create_topic("t")
    broker.produce("t", 0, b"a", b"b")
    broker.produce("t", 0, b"c", keys=[b"key"])
    answer = broker.fetch(version, [("t", 0, 2)])
    [topic] = answer.responses
    if version >= 13:
        assert topic.topic_id == broker.topic_id("t")
    else:
        assert topic.topic == "t"
    [p] = topic.partitions
    assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset) == (0, ErrorCode.none, 3, 3)
    assert records_of(p.records) == [(2, b"key", b"c")]
    if version >= 5:
        assert p.log_start_offset == 0
    if version >= 7:
        assert (answer.error_code, answer.session_id) == (ErrorCode.none, 0)  # a full fetch, no session
    assert values_of(partitions_of(broker.fetch(version, [("t", 0, 0)]))[0].records) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("version", [4, 16])
def test_nothing_to_read_with_no_wait_is_answered_at_once(broker, version):
    broker.create_topic("t")
    broker.produce("t", 0, b"a")
    [p] = partitions_of(broker.fetch(version, [("t", 0, 1)], max_wait_ms=0))
    assert (p.error_code, p.high_watermark, p.records) == (ErrorCode.none, 1, b"")


@pytest.mark.parametrize("version", BY_ID)
def test_an_unknown_topic_id(broker, version):
    broker.create_topic("t")
    broker.produce("t", 0, b"a")
    stranger = uuid.uuid4()
    answer = broker.fetch(version, [("t", 0, 0), ("other", 0, 0)], topic_ids={"t": broker.topic_id("t"),
                                                                               "other": stranger})
    known, unknown = answer.responses
    assert unknown.topic_id == stranger  # echoed, so the client can tell which
    assert errors(known.partitions + unknown.partitions) == ["none", "unknown_topic_id"]


@pytest.mark.parametrize("version", BY_NAME)
def test_unknown_topics_and_partitions_by_name(broker, version):
    broker.create_topic("t")
    broker.produce("t", 0, b"a")
    answer = broker.fetch(version, [("t", 0, 0), ("t", 3, 0), ("missing", 0, 0)])
    assert errors(partitions_of(answer)) == ["none", "unknown_topic_or_partition", "unknown_topic_or_partition"]
    assert values_of(partitions_of(answer)[0].records) == [b"a"]


@pytest.mark.parametrize("version", [4, 12, 16])
def test_an_offset_beyond_the_log_end(broker, version):
    broker.create_topic("t")
    broker.produce("t", 0, b"a", b"b")
    at_end, beyond = partitions_of(broker.fetch(version, [("t", 0, 2)])) + partitions_of(
        broker.fetch(version, [("t", 0, 10)]))
    assert (at_end.error_code, at_end.records) == (ErrorCode.none, b"")
    assert (beyond.error_code, beyond.high_watermark) == (ErrorCode.offset_out_of_range, 2)
    assert not beyond.records


@pytest.mark.parametrize("version", [4, 12])
def test_max_bytes_gives_the_first_partition_a_whole_batch_and_stops(broker, version):
    broker.create_topic("t", 2)
    big = b"x" * 1000
    broker.produce("t", 0, big)
    broker.produce("t", 0, big)
    broker.produce("t", 1, big)
    first, second = partitions_of(broker.fetch(version, [("t", 0, 0), ("t", 1, 0)], max_bytes=500))
    assert values_of(first.records) == [big]  # larger than max_bytes, yet sent (KIP-74)
    assert (second.error_code, second.high_watermark, second.records) == (ErrorCode.none, 1, b"")
    # batches of 1070 bytes: only whole ones that fit what is left of max_bytes
    limits = {1500: [[big], []], 2500: [[big, big], []], 3500: [[big, big], [big]]}
    for max_bytes, expected in limits.items():
        answer = broker.fetch(version, [("t", 0, 0), ("t", 1, 0)], max_bytes=max_bytes)
        assert [values_of(p.records) for p in partitions_of(answer)] == expected, max_bytes


def test_partition_max_bytes_limits_each_partition(broker):
    broker.create_topic("t")
    for value in (b"a" * 300, b"b" * 300, b"c" * 300):
        broker.produce("t", 0, value)
    # batches of 370 bytes: two fit in 800
    [p] = partitions_of(broker.fetch(12, [("t", 0, 0)], partition_max_bytes=800))
    assert values_of(p.records) == [b"a" * 300, b"b" * 300]
    [p] = partitions_of(broker.fetch(12, [("t", 0, 0)], partition_max_bytes=10))
    assert values_of(p.records) == [b"a" * 300]  # the first batch whatever the limit


def test_a_leader_epoch_newer_than_the_partitions_is_refused(broker):
    broker.create_topic("t")
    broker.produce("t", 0, b"a")
    for version in (9, 16):  # v9+ carry the consumer's idea of the leader epoch
        [current] = partitions_of(broker.fetch(version, [("t", 0, 0)], leader_epoch=0))
        [newer] = partitions_of(broker.fetch(version, [("t", 0, 0)], leader_epoch=3))
        assert errors([current, newer]) == ["none", "unknown_leader_epoch"]
        assert not newer.records


def test_read_committed_answers_an_empty_aborted_list(broker):
    broker.create_topic("t")
    broker.produce("t", 0, b"a")
    [committed] = partitions_of(broker.fetch(12, [("t", 0, 0)], isolation_level=1))
    [uncommitted] = partitions_of(broker.fetch(12, [("t", 0, 0)]))
    assert (committed.aborted_transactions, uncommitted.aborted_transactions) == ((), None)
    assert values_of(committed.records) == [b"a"]


def transactional(pid: int, *values: bytes) -> bytes:
    return encode_batch([Record(i, 0, None, v) for i, v in enumerate(values)], producer_id=pid, producer_epoch=0,
                        base_sequence=0, transactional=True)


def test_read_committed_stops_at_an_open_transaction_and_is_told_what_was_aborted(broker):
    """The partition side of transactions, markers written as the coordinator
    will: records up to the last stable offset; once aborted, the records with
    the transaction's producer and first offset, which the client drops; the
    table answers while the log has no abort, the owner after."""
    broker.create_topic("t")
    broker.produce("t", 0, b"plain")  # 0
    partition = broker.partitions.resolve("t", 0)
    assert not isinstance(partition, ErrorCode)
    partition.log.append(transactional(7, b"t1", b"t2"))  # 1-2, left open
    broker.produce("t", 0, b"after")  # 3
    [committed] = partitions_of(broker.fetch(12, [("t", 0, 0)], isolation_level=1))
    [uncommitted] = partitions_of(broker.fetch(12, [("t", 0, 0)]))
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 1)
    assert values_of(committed.records) == [b"plain"] and committed.aborted_transactions == ()
    assert values_of(uncommitted.records) == [b"plain", b"t1", b"t2", b"after"]
    table_says = published_locate(broker.ctx, "t", 0, 0, 1 << 20, -1, read_committed=True)
    assert table_says == partition.locate(0, 1 << 20, read_committed=True)

    partition.log.append(encode_control_batch(ABORT, producer_id=7, producer_epoch=0, coordinator_epoch=0),
                         origin=ORIGIN_COORDINATOR)  # 4
    [committed] = partitions_of(broker.fetch(12, [("t", 0, 0)], isolation_level=1))
    assert committed.last_stable_offset == committed.high_watermark == 5
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(7, 1)]
    assert values_of(committed.records) == [b"plain", b"t1", b"t2", b"after"]  # the marker is a control batch
    assert published_locate(broker.ctx, "t", 0, 0, 1 << 20, -1, read_committed=True) is None  # the owner knows
    [later] = partitions_of(broker.fetch(12, [("t", 0, 5)], isolation_level=1, max_wait_ms=0))
    assert later.aborted_transactions == () and later.records == b""


def test_a_long_poll_is_answered_when_data_arrives(broker):
    broker.create_topic("t")

    async def scenario():
        started = time.monotonic()
        waiting = asyncio.ensure_future(broker.call(fetch_request(12, [("t", 0, 0)], max_wait_ms=20_000)))
        await until(lambda: broker.partitions.purgatory.watched(("t", 0)) == 1, "the fetch parked in the purgatory")
        await broker.call(produce_request(9, "t", 0, batch(b"late")))
        answer = await waiting
        return answer, time.monotonic() - started

    answer, elapsed = broker.run(scenario())
    assert values_of(partitions_of(answer)[0].records) == [b"late"]
    assert elapsed < 10  # woken by the append, not by max_wait


def test_a_long_poll_with_nothing_arriving_ends_at_max_wait(broker):
    broker.create_topic("t")
    [p] = partitions_of(broker.fetch(12, [("t", 0, 0)], max_wait_ms=30))
    assert (p.error_code, p.records) == (ErrorCode.none, b"")


def test_a_fetch_answered_from_the_shared_table_is_what_the_owner_answers(make_broker):
    """Every offset and byte limit: the worker holding the connection, reading
    the owner's published offsets and recent batches, answers exactly as the
    owner's ``Locate`` would, or leaves the question to it."""
    broker = make_broker({"log.segment.bytes": 8192})  # a few segments: the recent batches are the active one's
    broker.create_topic("t")
    for i in range(60):
        broker.produce("t", 0, *[b"v%d" % i * (1 + (i * 37) % 300)] * (1 + i % 3))
    partition = broker.partitions.resolve("t", 0)
    assert not isinstance(partition, ErrorCode)
    assert len(partition.log.segments) > 2
    hw = partition.log.high_watermark
    here = 0
    for offset in range(hw + 2):
        for max_bytes in (1, 100, 700, 2000, 5000, 1 << 20):
            mine = published_locate(broker.ctx, "t", 0, offset, max_bytes, -1)
            if mine is not None:
                here += 1
                assert mine == partition.locate(offset, max_bytes), (offset, max_bytes)
    active = partition.log.active_segment
    in_recent = hw - max(active.base_offset, active.recent[0][0])
    assert here == (in_recent + 1) * 6, "the recent batches and the log end are answered without the owner"
    assert published_locate(broker.ctx, "t", 0, 0, 1 << 20, 5) is None, "another leader epoch: the owner says"


def test_a_consumer_reads_through_the_table_while_the_log_rolls_and_its_start_moves(make_broker):
    broker = make_broker({"log.segment.bytes": 2048})
    broker.create_topic("t")
    read = []
    for i in range(30):
        broker.produce("t", 0, b"%d" % i * 100)
        [p] = partitions_of(broker.fetch(12, [("t", 0, len(read))]))
        read += values_of(p.records)
    assert read == [b"%d" % i * 100 for i in range(30)]
    [(_, deleted)] = delete_records(broker, 2, ("t", 0, 20))
    assert deleted.error_code == ErrorCode.none
    [p] = partitions_of(broker.fetch(12, [("t", 0, 10)]))
    assert p.error_code == ErrorCode.offset_out_of_range
    [p] = partitions_of(broker.fetch(12, [("t", 0, 25)]))
    assert values_of(p.records)[0] == b"25" * 100


def test_a_few_kilobytes_are_read_into_the_answer_and_more_are_sent_from_the_file(broker):
    """A tail fetch's batch or two goes out in the answer's own bytes (one write);
    a larger read stays a region of the segment file, for sendfile."""
    broker.create_topic("small")
    broker.create_topic("large")
    broker.produce("small", 0, b"s" * 1000)
    broker.produce("large", 0, b"x" * (SMALL_RECORDS_BYTES + 1))

    def pieces(topic: str) -> list:
        frame = client_codec.encode_request(fetch_request(12, [(topic, 0, 0)]), 7, "client")[4:]
        header, decoded = decode_request(frame)
        return broker.run(ROUTES[FETCH_KEY](broker.ctx, header, decoded))

    small = pieces("small")
    assert not any(isinstance(piece, FileRegion) for piece in small)
    large = pieces("large")
    regions = [piece for piece in large if isinstance(piece, FileRegion)]
    assert len(regions) == 1 and regions[0].size > SMALL_RECORDS_BYTES
    for region in regions:
        os.close(region.fd)  # the response's own duplicate, as the connection closes it after sending
    assert values_of(partitions_of(broker.fetch(12, [("small", 0, 0)]))[0].records) == [b"s" * 1000]
    large_values = values_of(partitions_of(broker.fetch(12, [("large", 0, 0)]))[0].records)
    assert large_values == [b"x" * (SMALL_RECORDS_BYTES + 1)]
