"""The leader's answer to a follower's Fetch, read by hand, is what kio (Kafka's
own schemas) reads from the same bytes; records come back as slices of the
frame, and a frame cut short or bent out of shape is refused, not misread."""

import datetime
import io
import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st
from kio.schema.fetch.v15.response import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
    SnapshotId,
)
from kio.serial import entity_writer

from hpbroker.errors import ErrorCode
from hpbroker.replication.fetch_response import MalformedResponse, decode_fetch_answer
from hpbroker.workers.fetch_response import PartitionResult, TopicResult, encode_fetch_response
from hpbroker.workers.kio_build import make

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
error_codes = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.offset_out_of_range,
                               ErrorCode.fenced_leader_epoch, ErrorCode.unknown_topic_id])
partition = st.builds(
    dict, index=int32, error=error_codes, high_watermark=int64, last_stable_offset=int64, log_start_offset=int64,
    aborted=st.none() | st.lists(st.tuples(int64, int64), max_size=2),
    diverging=st.just((-1, -1)) | st.tuples(int32, int64), leader=st.just((-1, -1)) | st.tuples(int32, int32),
    records=st.none() | st.binary(max_size=300))
topics = st.lists(st.tuples(st.uuids(), st.lists(partition, max_size=3)), max_size=3)


def kio_frame(correlation_id: int, error: ErrorCode, topics) -> memoryview:
    response = make(FetchResponse, throttle_time=datetime.timedelta(0), error_code=error, session_id=0, responses=tuple(
        make(FetchableTopicResponse, topic_id=topic_id, partitions=tuple(make(
            PartitionData, partition_index=p["index"], error_code=p["error"], high_watermark=p["high_watermark"],
            last_stable_offset=p["last_stable_offset"], log_start_offset=p["log_start_offset"],
            # kio writes a tagged field only when it differs from its default (-1s)
            diverging_epoch=make(EpochEndOffset, epoch=p["diverging"][0], end_offset=p["diverging"][1]),
            current_leader=make(LeaderIdAndEpoch, leader_id=p["leader"][0], leader_epoch=p["leader"][1]),
            snapshot_id=make(SnapshotId, end_offset=-1, epoch=-1),
            aborted_transactions=None if p["aborted"] is None else tuple(
                make(AbortedTransaction, producer_id=pid, first_offset=first) for pid, first in p["aborted"]),
            preferred_read_replica=-1, records=p["records"]) for p in parts))
        for topic_id, parts in topics))
    out = io.BytesIO()
    out.write(struct.pack(">i", correlation_id) + b"\x00")  # response header v1, no tags
    entity_writer(FetchResponse)(out, response)
    return memoryview(bytearray(out.getvalue()))


@settings(max_examples=120, deadline=None)
@given(correlation_id=st.integers(0, 2**31 - 1), error=error_codes, topics=topics)
def test_it_reads_what_kio_writes(correlation_id, error, topics):
    answer = decode_fetch_answer(kio_frame(correlation_id, error, topics))
    assert answer.error_code == error
    assert [t.topic_id for t in answer.responses] == [t for t, _ in topics]
    for got_topic, (_, parts) in zip(answer.responses, topics):
        assert len(got_topic.partitions) == len(parts)
        for got, p in zip(got_topic.partitions, parts):
            assert (got.partition_index, got.error_code, got.high_watermark, got.last_stable_offset,
                    got.log_start_offset) == (p["index"], p["error"], p["high_watermark"], p["last_stable_offset"],
                                              p["log_start_offset"])
            assert (got.diverging_epoch, got.diverging_end_offset) == p["diverging"]
            assert (None if got.records is None else bytes(got.records)) == p["records"]


def test_it_reads_the_leaders_own_answer_and_hands_back_writable_slices_of_the_frame():
    topic_id = uuid.uuid4()
    pieces = encode_fetch_response(15, 42, [TopicResult("t", topic_id, [
        PartitionResult(0, 0, 120, 120, 3, None, b"batch-bytes"),
        PartitionResult(1, int(ErrorCode.not_leader_or_follower), -1, -1, -1, None, None)])])
    frame = bytearray(b"".join(pieces))[4:]  # as the connection receives it, size prefix gone
    answer = decode_fetch_answer(memoryview(frame))
    [topic] = answer.responses
    first, second = topic.partitions
    assert (topic.topic_id, first.partition_index, first.high_watermark, first.log_start_offset) == (
        topic_id, 0, 120, 3)
    records = first.records
    assert records is not None and bytes(records) == b"batch-bytes" and not records.readonly
    records[0:1] = b"B"  # the frame's own bytes: no copy was made
    assert b"Batch-bytes" in frame
    assert (second.error_code, second.records) == (ErrorCode.not_leader_or_follower, None)


def test_a_frame_cut_anywhere_is_refused():
    frame = kio_frame(7, ErrorCode.none, [(uuid.uuid4(), [dict(
        index=0, error=ErrorCode.none, high_watermark=10, last_stable_offset=10, log_start_offset=0, aborted=[(1, 2)],
        diverging=(3, 9), leader=(1, 4), records=b"x" * 40)])])
    decode_fetch_answer(frame)
    for cut in range(len(frame) - 1):
        with pytest.raises(MalformedResponse):
            decode_fetch_answer(frame[:cut])


def test_a_length_beyond_the_frame_or_an_unknown_error_code_is_refused():
    frame = kio_frame(7, ErrorCode.none, [(uuid.uuid4(), [])])
    huge_count = bytearray(frame)
    huge_count[4 + 1 + 10] = 0x7F  # the topic array's length: 126 topics in a few bytes
    with pytest.raises(MalformedResponse, match="elements"):
        decode_fetch_answer(memoryview(huge_count))
    bad_error = bytearray(frame)
    struct.pack_into(">h", bad_error, 4 + 1 + 4, 12345)
    with pytest.raises(MalformedResponse):
        decode_fetch_answer(memoryview(bad_error))
