"""The ListOffsets response written straight from answers is, byte for byte,
what kio (Kafka's own schemas) writes from the same answer, in every version
served."""

import datetime

import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.errors import ErrorCode
from hpbroker.protocol import list_offsets_response
from hpbroker.protocol.codec import encode_response
from hpbroker.protocol.header import RequestHeader
from hpbroker.workers.kio_build import make, response_module

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
partition = st.tuples(st.integers(0, 2**31 - 1), st.sampled_from(list(ErrorCode)), int64, int64, int32)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=200), st.lists(partition, max_size=4)), max_size=4)


def kio_frame(correlation_id: int, version: int, rows, throttle_ms: int) -> bytes:
    m = response_module(2, version)
    response = make(m.ListOffsetsResponse, throttle_time=datetime.timedelta(milliseconds=throttle_ms), topics=tuple(
        make(m.ListOffsetsTopicResponse, name=name, partitions=tuple(
            make(m.ListOffsetsPartitionResponse, partition_index=index, error_code=error, timestamp=timestamp,
                 offset=offset, leader_epoch=epoch)
            for index, error, timestamp, offset, epoch in partitions)) for name, partitions in rows))
    return encode_response(RequestHeader(2, version, correlation_id, None, 0), response)


@settings(max_examples=80, deadline=None)
@given(correlation_id=int32, version=st.integers(list_offsets_response.MIN_VERSION, list_offsets_response.MAX_VERSION),
       rows=topics, throttle_ms=st.integers(0, 2**31 - 1))
def test_every_version_is_written_as_kio_writes_it(correlation_id, version, rows, throttle_ms):
    assert list_offsets_response.encode(correlation_id, version, rows, throttle_ms) == \
        kio_frame(correlation_id, version, rows, throttle_ms)


@pytest.mark.parametrize("version", [0, 12])
def test_a_version_not_served_is_refused(version):
    with pytest.raises(ValueError, match=f"v{version}"):
        list_offsets_response.encode(1, version, [])
