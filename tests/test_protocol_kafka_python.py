"""Cross-checks against an independent implementation: kafka-python's protocol classes.

Requests are encoded by kafka-python (header and size prefix included) and decoded
by us; our framed responses are decoded by kafka-python. Versions are the ones the
target clients send (tests/test_protocol_versions.py lists them) plus a neighbour or two.
"""

import dataclasses
import datetime
import importlib
import uuid
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.old import produce as old_produce
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from hpbroker.errors import ErrorCode
from hpbroker.protocol import (
    SUPPORTED_VERSIONS,
    FrameReader,
    RequestHeader,
    api_versions_response,
    decode_request,
    encode_response,
    response_type,
    unsupported_api_versions_response,
)

TOPIC_ID = uuid.UUID("6c1a0d4e-2f43-4a63-9d0b-0d5f3b1e2a77")
BATCH = bytes(range(70))  # opaque to the protocol layer


def ours(kafka_python_request, correlation_id=11) -> tuple[RequestHeader, Any]:
    """Encode with kafka-python, split and decode with ours.  The request is the
    kio class of the header's version, so its type is known only at run time."""
    kafka_python_request.with_header(correlation_id=correlation_id, client_id="kp-test")
    wire = kafka_python_request.encode(header=True, framed=True)
    [frame] = FrameReader().feed(wire)
    header, request = decode_request(frame)
    assert (header.api_key, header.correlation_id, header.client_id) == (
        kafka_python_request.API_KEY, correlation_id, "kp-test")
    return header, request


def theirs(response_class, version, header, our_response):
    data = encode_response(header, our_response)
    if version is None:  # kafka-python's old hand-written classes carry their version
        got = response_class.decode(data, header=True, framed=True)
    else:
        got = response_class.decode(data, version=version, header=True, framed=True)
    assert got.header.correlation_id == header.correlation_id
    return got


class module_of:
    """kio's response classes for one version; ``m.Name(**fields)`` drops the fields
    that version does not have, so one test body serves several versions."""

    def __init__(self, api_key, version):
        self._module = importlib.import_module(response_type(api_key, version).__module__)

    def __getattr__(self, name):
        cls = getattr(self._module, name)
        known = {f.name for f in dataclasses.fields(cls)}
        return lambda **kw: cls(**{k: v for k, v in kw.items() if k in known})


ms = datetime.timedelta  # kio carries durations as timedeltas


# --- ApiVersions ---------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions(version):
    kwargs = {"client_software_name": "kafka-python", "client_software_version": "3.0"} if version >= 3 else {}
    header, request = ours(ApiVersionsRequest[version](**kwargs))
    if version >= 3:
        assert request.client_software_name == "kafka-python"
    got = theirs(ApiVersionsResponse, version, header, api_versions_response(version))
    assert got.error_code == 0
    assert {a.api_key: (a.min_version, a.max_version) for a in got.api_keys} == dict(SUPPORTED_VERSIONS)


def test_api_versions_fallback_decodes_as_v0_for_kafka_python():
    header, _ = ours(ApiVersionsRequest[4](client_software_name="x", client_software_version="y"))
    got = theirs(ApiVersionsResponse, 4, header, unsupported_api_versions_response())
    assert got.error_code == ErrorCode.unsupported_version
    assert [(a.api_key, a.min_version, a.max_version) for a in got.api_keys] == [(18, 0, 4)]


# --- Metadata ------------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 5, 9, 12, 13])
def test_metadata(version):
    kwargs = {"allow_auto_topic_creation": False} if version >= 4 else {}
    header, request = ours(MetadataRequest[version](
        topics=[MetadataRequest.MetadataRequestTopic(name="orders")], **kwargs))
    assert [t.name for t in request.topics] == ["orders"]
    if version >= 4:
        assert request.allow_auto_topic_creation is False

    m = module_of(3, version)
    partition = m.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=4,
                                            replica_nodes=(1,), isr_nodes=(1,), offline_replicas=())
    topic = m.MetadataResponseTopic(error_code=ErrorCode.none, name="orders", topic_id=TOPIC_ID, is_internal=False,
                                    partitions=(partition,))
    broker = m.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack=None)
    response = m.MetadataResponse(throttle_time=ms(0), brokers=(broker,), cluster_id="cluster-a", controller_id=1,
                                  topics=(topic,), error_code=ErrorCode.none)
    got = theirs(MetadataResponse, version, header, response)
    assert [(b.node_id, b.host, b.port) for b in got.brokers] == [(1, "127.0.0.1", 9092)]
    assert got.cluster_id == ("cluster-a" if version >= 2 else None)  # v2 added it
    [t] = got.topics
    assert t.name == "orders" and [p.leader_id for p in t.partitions] == [1]
    if version >= 10:
        assert t.topic_id == TOPIC_ID


# --- Produce -------------------------------------------------------------------------

@pytest.mark.parametrize("version", [3, 7, 9, 10])
def test_produce(version):
    header, request = ours(ProduceRequest[version](
        transactional_id=None, acks=-1, timeout_ms=1500,
        topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=BATCH) for p in (0, 3)])]))
    assert request.acks == -1 and request.timeout == ms(milliseconds=1500)
    [topic] = request.topic_data
    assert topic.name == "orders"
    assert [(p.index, p.records) for p in topic.partition_data] == [(0, BATCH), (3, BATCH)]

    m = module_of(0, version)
    partitions = (m.PartitionProduceResponse(index=0, error_code=ErrorCode.none, base_offset=1000, log_start_offset=5,
                                             record_errors=()),
                  m.PartitionProduceResponse(index=3, error_code=ErrorCode.not_leader_or_follower, base_offset=-1,
                                             record_errors=()))
    response = m.ProduceResponse(responses=(m.TopicProduceResponse(name="orders", partition_responses=partitions),),
                                 throttle_time=ms(milliseconds=7))
    got = theirs(ProduceResponse, version, header, response)
    assert got.throttle_time_ms == 7
    [t] = got.responses
    assert [(p.index, p.error_code, p.base_offset, p.log_append_time_ms) for p in t.partition_responses] == [
        (0, 0, 1000, -1), (3, 6, -1, -1)]
    if version >= 5:
        assert t.partition_responses[0].log_start_offset == 5


@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_produce_v0_to_v2(version):
    cls = getattr(old_produce, f"ProduceRequest_v{version}")
    header, request = ours(cls(acks=1, timeout_ms=2000, topic_data=[("legacy", [(2, BATCH)])]))
    assert header.api_version == version and header.header_version == 1
    assert request.transactional_id is None and request.acks == 1
    assert [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in request.topic_data] == [
        ("legacy", [(2, BATCH)])]

    m = module_of(0, version)  # kio's v3 classes stand in for v0-v2
    appended = datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc)
    response = m.ProduceResponse(responses=(m.TopicProduceResponse(name="legacy", partition_responses=(
        m.PartitionProduceResponse(index=2, error_code=ErrorCode.unknown_topic_or_partition, base_offset=77,
                                   log_append_time=appended),)),), throttle_time=ms(milliseconds=3))
    got = theirs(getattr(old_produce, f"ProduceResponse_v{version}"), None, header, response)
    [(name, [partition])] = [(t[0], t[1]) for t in got.topics]
    assert name == "legacy" and tuple(partition[:3]) == (2, 3, 77)
    if version == 2:
        assert partition[3] == int(appended.timestamp() * 1000)
    if version >= 1:
        assert got.throttle_time_ms == 3


# --- Fetch ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_fetch(version):
    part = FetchRequest.FetchTopic.FetchPartition(partition=1, current_leader_epoch=-1, fetch_offset=42,
                                                  log_start_offset=-1, partition_max_bytes=1 << 20)
    topic = FetchRequest.FetchTopic(topic="orders", topic_id=TOPIC_ID, partitions=[part])
    header, request = ours(FetchRequest[version](replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 24,
                                                 isolation_level=1, topics=[topic]))
    assert request.max_wait == ms(milliseconds=500) and request.min_bytes == 1
    [t] = request.topics
    if version >= 13:
        assert t.topic_id == TOPIC_ID
    else:
        assert t.topic == "orders"
    assert [(p.partition, p.fetch_offset) for p in t.partitions] == [(1, 42)]

    m = module_of(1, version)
    partition = m.PartitionData(partition_index=1, error_code=ErrorCode.none, high_watermark=50, last_stable_offset=50,
                                log_start_offset=0, aborted_transactions=None, records=BATCH)
    response = m.FetchResponse(throttle_time=ms(0), error_code=ErrorCode.none, session_id=0, responses=(
        m.FetchableTopicResponse(topic="orders", topic_id=TOPIC_ID, partitions=(partition,)),))
    got = theirs(FetchResponse, version, header, response)
    [r] = got.responses
    [p] = r.partitions
    assert (p.partition_index, p.high_watermark, bytes(p.records)) == (1, 50, BATCH)
    if version >= 13:
        assert r.topic_id == TOPIC_ID


# --- ListOffsets ---------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 3, 7, 11])
def test_list_offsets(version):
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-2)
    header, request = ours(ListOffsetsRequest[version](
        replica_id=-1, isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name="orders", partitions=[part])]))
    [t] = request.topics
    assert t.name == "orders" and [(p.partition_index, p.timestamp) for p in t.partitions] == [(0, -2)]

    m = module_of(2, version)
    response = m.ListOffsetsResponse(throttle_time=ms(0), topics=(m.ListOffsetsTopicResponse(name="orders", partitions=(
        m.ListOffsetsPartitionResponse(partition_index=0, error_code=ErrorCode.none, timestamp=-1, offset=123,
                                       leader_epoch=0),)),))
    got = theirs(ListOffsetsResponse, version, header, response)
    [(t)] = got.topics
    assert [(p.partition_index, p.offset) for p in t.partitions] == [(0, 123)]
