"""Produce requests read by hand (``protocol/produce_request.py``): the same
request kio reads from the same bytes, for every version from 3 to 10, with
the records left as writable slices of the frame; malformed bytes refused;
the request without its records answered as the request."""

import datetime
import importlib

import pytest
from hypothesis import given, settings, strategies as st
from kio.serial import entity_reader

from hpbroker.errors import ErrorCode
from hpbroker.protocol import MalformedRequest, client_codec, produce_request
from hpbroker.protocol.error_response import error_response
from hpbroker.protocol.header import parse_request_header

VERSIONS = range(3, 11)


def _classes(version: int):
    module = importlib.import_module(f"kio.schema.produce.v{version}.request")
    return module.ProduceRequest, module.TopicProduceData, module.PartitionProduceData


def _request(version: int, transactional_id, acks: int, timeout_ms: int, topics):
    request, topic, partition = _classes(version)
    return request(transactional_id=transactional_id, acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms),
                   topic_data=tuple(topic(name=name, partition_data=tuple(
                       partition(index=index, records=records) for index, records in parts)) for name, parts in topics))


def _frame(request) -> bytearray:
    """The request as a connection holds it: a writable frame without its size prefix."""
    return bytearray(client_codec.encode_request(request, 7, "test")[4:])


def _body_start(frame) -> int:
    return parse_request_header(frame, 2 if _flexible(frame) else 1)[1]


def _flexible(frame) -> bool:
    return int.from_bytes(frame[2:4], "big") >= produce_request.FIRST_FLEXIBLE


requests = st.builds(
    _request,
    st.sampled_from(VERSIONS),
    st.none() | st.text(max_size=8),
    st.sampled_from([0, 1, -1, 5]),
    st.integers(0, 2**31 - 1),
    st.lists(st.tuples(st.text(min_size=1, max_size=8),
                       st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.none() | st.binary(max_size=300)),
                                max_size=3)), max_size=3))


@given(requests)
@settings(max_examples=200, deadline=None)
def test_the_same_request_as_kio_reads_with_records_as_slices_of_the_frame(request):
    frame = _frame(request)
    version = int.from_bytes(frame[2:4], "big")
    ours = produce_request.decode(memoryview(frame), _body_start(frame), version)
    kios, _ = entity_reader(type(request))(memoryview(bytes(frame)), _body_start(frame))
    assert (ours.transactional_id, ours.acks, ours.timeout) == (kios.transactional_id, kios.acks, kios.timeout)
    assert [t.name for t in ours.topic_data] == [t.name for t in kios.topic_data]
    for mine, theirs in zip(ours.topic_data, kios.topic_data, strict=True):
        for p, q in zip(mine.partition_data, theirs.partition_data, strict=True):
            assert p.index == q.index
            assert (None if p.records is None else bytes(p.records)) == q.records
            if p.records is not None:  # a view of the frame itself, writable: Log.append stamps it there
                assert p.records.obj is frame and not p.records.readonly


@given(requests)
@settings(max_examples=100, deadline=None)
def test_without_its_records_a_request_keeps_every_field_and_gets_the_same_error_answer(request):
    """What an acks=all produce keeps while it waits for the replicas: no view
    of the frame, and the same answer should the wait fail."""
    frame = _frame(request)
    version = int.from_bytes(frame[2:4], "big")
    whole = produce_request.decode(memoryview(frame), _body_start(frame), version)
    kept = whole.without_records()
    assert kept[:4] == whole[:4]
    assert [(t.name, [p.index for p in t.partition_data]) for t in kept.topic_data] == \
        [(t.name, [p.index for p in t.partition_data]) for t in whole.topic_data]
    assert all(p.records is None for t in kept.topic_data for p in t.partition_data)
    assert error_response(0, version, kept, ErrorCode.not_enough_replicas, "x") == \
        error_response(0, version, whole, ErrorCode.not_enough_replicas, "x")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_of_a_request_is_malformed(version):
    request = _request(version, "txn", -1, 30000, [("topic", [(0, b"\x01" * 70), (1, None)]), ("other", [(2, b"")])])
    frame = _frame(request)
    start = _body_start(frame)
    for end in range(start, len(frame)):
        with pytest.raises(MalformedRequest):
            produce_request.decode(memoryview(frame)[:end], start, version)


def test_unknown_tagged_fields_are_skipped():
    request = _request(9, None, 1, 1000, [("t", [(0, b"records")])])
    frame = _frame(request)
    assert frame.endswith(b"\x00\x00\x00")  # empty tag sections: partition, topic, request
    tagged = frame[:-3] + b"\x01\x05\x02ab" + b"\x00" + b"\x01\x63\x00"  # tags 5 (2 bytes) and 99 (empty)
    [plain, with_tags] = [produce_request.decode(memoryview(f), _body_start(f), 9) for f in (frame, tagged)]
    assert with_tags.topic_data[0].partition_data[0].index == plain.topic_data[0].partition_data[0].index
    records = with_tags.topic_data[0].partition_data[0].records
    assert records is not None and bytes(records) == b"records"


@pytest.mark.parametrize("patch, message", [
    (lambda body: body[:-4] + b"\xff\xff\xff\xfe", "records have length -2"),  # v3: records length -2
    (lambda body: body[:8] + b"\x7f\xff\xff\xff" + body[12:], "longer than"),  # topic_data counting 2^31 - 1
])
def test_impossible_lengths_are_malformed(patch, message):
    request = _request(3, None, 1, 1000, [("t", [(0, b"")])])
    frame = _frame(request)
    start = _body_start(frame)
    body = patch(bytes(frame[start:]))
    with pytest.raises(MalformedRequest, match=message):
        produce_request.decode(memoryview(bytearray(frame[:start]) + body), start, 3)
