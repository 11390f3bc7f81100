"""The Produce response written straight from results is, byte for byte, what
kio (Kafka's own schemas) writes from the same answer, in every version."""

import datetime

import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.errors import ErrorCode
from hpbroker.protocol import produce_response
from hpbroker.protocol.codec import encode_response
from hpbroker.protocol.header import RequestHeader
from hpbroker.workers.kio_build import make, response_module

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-1, 2**62)
message = st.none() | st.text(max_size=40)
partition = st.tuples(st.integers(0, 2**31 - 1), st.sampled_from(list(ErrorCode)), int64,
                      st.just(-1) | st.integers(0, 2**41), int64, message)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.lists(partition, max_size=4)), max_size=4)


def kio_frame(correlation_id: int, version: int, rows, throttle_ms: int) -> bytes:
    m = response_module(0, version)
    parts = tuple(make(m.TopicProduceResponse, name=name, partition_responses=tuple(
        make(m.PartitionProduceResponse, index=index, error_code=error, base_offset=base,
             log_append_time=None if append < 0 else datetime.datetime.fromtimestamp(append / 1000,
                                                                                        tz=datetime.timezone.utc),
             log_start_offset=start, record_errors=(), error_message=text)
        for index, error, base, append, start, text in partitions)) for name, partitions in rows)
    response = make(m.ProduceResponse, responses=parts, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return encode_response(RequestHeader(0, version, correlation_id, None, 0), response)


@settings(max_examples=60, deadline=None)
@given(correlation_id=int32, version=st.integers(0, produce_response.MAX_VERSION), rows=topics,
       throttle_ms=st.integers(0, 2**31 - 1))
def test_every_version_is_written_as_kio_writes_it(correlation_id, version, rows, throttle_ms):
    assert produce_response.encode(correlation_id, version, rows, throttle_ms) == \
        kio_frame(correlation_id, version, rows, throttle_ms)


def test_an_unknown_version_is_refused():
    with pytest.raises(ValueError, match="v11"):
        produce_response.encode(1, 11, [])
