"""The replica admin APIs on a standalone broker, through real clients:
DescribeLogDirs (sizes read back against the segment files on disk),
AlterPartitionReassignments / ListPartitionReassignments and ElectLeaders,
answered as Kafka answers them on a one-broker cluster."""

import importlib
import io
import os
import socket
import struct

import confluent_kafka as ck
import kafka.errors as kerrors
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KpTopicPartition
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32

from harness.request_samples import response_schema
from hpbroker.errors import ErrorCode
from hpbroker.protocol.schemas import request_type
from tests.integration.clients import ck_produce, topic_name
from tests.integration.conftest import module_broker

PARTITIONS = 3
ME = 0  # broker.id's default
broker = module_broker({"num.partitions": str(PARTITIONS)})


@pytest.fixture(scope="module")
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


@pytest.fixture(scope="module")
def topic(broker):
    """A topic with records in partitions 0 and 1, none in 2."""
    name = topic_name("admin-replicas")
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=15)[name].result(15)
    ck_produce(broker.bootstrap, name, [{"value": b"x" * 100, "partition": p} for p in (0, 0, 1) for _ in range(50)])
    return name


def segment_bytes(directory) -> int:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.endswith(".log"))


def roundtrip(broker, api_key: int, version: int, request):
    """One request (kio object) on a fresh connection; its decoded response."""
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    flexible = type(request).__flexible__
    frame = struct.pack(">hhih", api_key, version, 7, 3) + b"raw" + (b"\x00" if flexible else b"") + body.getvalue()
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        with s.makefile("rb") as stream:
            size = struct.unpack(">i", stream.read(4))[0]
            data = stream.read(size)
    assert len(data) == size and struct.unpack_from(">i", data)[0] == 7
    response, _ = entity_reader(response_schema(api_key, version))(data, 5 if flexible else 4)
    return response


# --- DescribeLogDirs ----------------------------------------------------------------------------------
def test_describe_log_dirs_gives_each_partitions_size(broker, admin, topic):
    [answer] = admin.describe_log_dirs(brokers=[ME])
    [log_dir] = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == str(broker.data_dir.resolve())
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    [found] = [t for t in log_dir["topics"] if t["name"] == topic]
    sizes = {p["partition_index"]: p["partition_size"] for p in found["partitions"]}
    assert sizes == {p: segment_bytes(broker.data_dir / f"{topic}-{p}") for p in range(PARTITIONS)}
    assert sizes[0] > sizes[1] > sizes[2] == 0  # 100 records, 50, none
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in found["partitions"])


def test_describe_log_dirs_filters_by_partition(broker, admin, topic):
    [answer] = admin.describe_log_dirs({topic: [1], "no-such-topic": [0]}, brokers=[ME])
    [log_dir] = answer["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in log_dir["topics"]] == [(topic, [1])]
    [answer] = admin.describe_log_dirs({topic: []}, brokers=[ME])
    assert answer["log_dirs"][0]["topics"] == []


# --- reassignments -------------------------------------------------------------------------------------
def test_reassignments_on_one_broker(admin, topic):
    tp = lambda p: KpTopicPartition(topic, p)  # noqa: E731
    results = admin.alter_partition_reassignments({
        tp(0): [ME],            # where it is already: nothing to do
        tp(1): [ME, 7],         # a broker that is not there
        tp(2): None,            # nothing to cancel
        tp(9): [ME],            # no such partition
        KpTopicPartition("no-such-topic", 0): [ME],
    })
    assert results == {tp(0): None, tp(1): kerrors.InvalidReplicationAssignmentError,
                       tp(2): kerrors.NoReassignmentInProgressError, tp(9): kerrors.UnknownTopicOrPartitionError,
                       KpTopicPartition("no-such-topic", 0): kerrors.UnknownTopicOrPartitionError}
    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments({topic: [0, 1]}) == {}


def test_alter_reassignments_v1_echoes_its_flag_and_refuses_an_empty_list(broker, topic):
    kio = importlib.import_module(request_type(45, 1).__module__)
    request = kio.AlterPartitionReassignmentsRequest(allow_replication_factor_change=False, topics=(
        kio.ReassignableTopic(name=topic,
                              partitions=(kio.ReassignablePartition(partition_index=i32(0), replicas=()),)),))
    response = roundtrip(broker, 45, 1, request)
    assert response.error_code == ErrorCode.none and response.allow_replication_factor_change is False
    [[partition]] = [t.partitions for t in response.responses]
    assert partition.error_code == ErrorCode.invalid_replica_assignment


# --- ElectLeaders -------------------------------------------------------------------------------------
def test_elect_leaders_is_never_needed_on_one_broker(admin, topic):
    for election_type in (0, 1):
        response = admin.elect_leaders(election_type, {topic: [0, 1], "no-such-topic": [0]}, raise_errors=False)
        codes = {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
                 for p in r.partition_result}
        assert codes == {(topic, 0): ErrorCode.election_not_needed, (topic, 1): ErrorCode.election_not_needed,
                         ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}


def test_elect_leaders_with_confluent_kafka(broker, topic):
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = client.elect_leaders(ck.ElectionType.PREFERRED, [ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 2)])
    results = future.result(15)
    assert {(tp.topic, tp.partition): error.code() for tp, error in results.items()} == {
        (topic, 0): ck.KafkaError.ELECTION_NOT_NEEDED, (topic, 2): ck.KafkaError.ELECTION_NOT_NEEDED}


def test_elect_leaders_of_everything_lists_only_what_was_elected_or_failed(broker):
    module = importlib.import_module(request_type(43, 2).__module__)
    response = roundtrip(broker, 43, 2, module.ElectLeadersRequest(election_type=i8(0), topic_partitions=None))
    assert response.error_code == ErrorCode.none and response.replica_election_results == ()
    # an election type Kafka does not have
    response = roundtrip(broker, 43, 2, module.ElectLeadersRequest(election_type=i8(5), topic_partitions=(
        module.TopicPartitions(topic="t", partitions=(i32(0),)),)))
    assert [p.error_code for r in response.replica_election_results for p in r.partition_result] == \
        [ErrorCode.invalid_request]
