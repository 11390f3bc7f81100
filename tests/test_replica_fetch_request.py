"""A follower's Fetch request written by hand is, byte for byte, what kio
(Kafka's own schemas) writes for the same request."""

import datetime
import uuid

from hypothesis import given, settings, strategies as st
from kio.schema.fetch.v15.request import FetchPartition, FetchRequest, FetchTopic, ReplicaState

from hpbroker.protocol.client_codec import encode_request
from hpbroker.protocol.codec import decode_request
from hpbroker.replication.fetch_request import ReplicaFetch
from hpbroker.workers.kio_build import make

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
partition = st.tuples(int32, int32, int64, int32, int64, int32)
topics = st.lists(st.tuples(st.uuids(), st.lists(partition, max_size=3)), max_size=3)


def kio_request(fetch: ReplicaFetch):
    return make(
        FetchRequest, cluster_id=None, replica_state=make(ReplicaState, replica_id=fetch.replica_id,
                                                          replica_epoch=fetch.replica_epoch),
        max_wait=datetime.timedelta(milliseconds=fetch.max_wait_ms), min_bytes=fetch.min_bytes,
        max_bytes=fetch.max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
        topics=tuple(make(FetchTopic, topic_id=topic_id, partitions=tuple(
            make(FetchPartition, partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=le,
                 log_start_offset=s, partition_max_bytes=m) for p, e, o, le, s, m in parts))
            for topic_id, parts in fetch.topics),
        forgotten_topics_data=(), rack_id="")


@settings(max_examples=80, deadline=None)
@given(correlation_id=st.integers(0, 2**31 - 1), client_id=st.none() | st.text(max_size=30), replica_id=int32,
       replica_epoch=int64, max_wait_ms=st.integers(0, 2**31 - 1), min_bytes=int32, max_bytes=int32, topics=topics)
def test_it_is_written_as_kio_writes_it(correlation_id, client_id, replica_id, replica_epoch, max_wait_ms, min_bytes,
                                        max_bytes, topics):
    fetch = ReplicaFetch(replica_id, replica_epoch, max_wait_ms, min_bytes, max_bytes, topics)
    wire = fetch.encode(correlation_id, client_id)
    assert wire == encode_request(kio_request(fetch), correlation_id, client_id)


def test_the_broker_reads_it_as_the_follower_meant_it():
    topic_id = uuid.uuid4()
    fetch = ReplicaFetch(2, 7, 500, 1, 10 << 20, [(topic_id, [(0, 3, 1000, 3, 0, 1 << 20)])])
    header, request = decode_request(memoryview(fetch.encode(9, "broker-2"))[4:])
    assert isinstance(request, FetchRequest)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (1, 15, 9, "broker-2")
    assert (request.replica_state.replica_id, request.replica_state.replica_epoch) == (2, 7)
    [topic] = request.topics
    assert topic.topic_id == topic_id
    [p] = topic.partitions
    assert (p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
            p.partition_max_bytes) == (0, 3, 1000, 3, 0, 1 << 20)
