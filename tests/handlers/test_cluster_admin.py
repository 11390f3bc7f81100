"""DescribeCluster (60), DescribeLogDirs (35), ElectLeaders (43),
AlterPartitionReassignments (45) and ListPartitionReassignments (46) as a
standalone broker answers them: it is the whole cluster and leads everything."""

import os
import shutil

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import (
    ALTER_REASSIGNMENTS,
    CLUSTER_ID,
    DESCRIBE_CLUSTER,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    HOST,
    LIST_REASSIGNMENTS,
    PORT,
    errors,
    flattened,
    request,
)

PREFERRED, UNCLEAN = 0, 1
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


# --- DescribeCluster -------------------------------------------------------------------------
# CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE: bits 5, 7-12
ALL_CLUSTER_OPERATIONS = 8096


@pytest.mark.parametrize("version", [0, 2])
def test_describe_cluster(broker, version):
    answer = broker.send(request(DESCRIBE_CLUSTER, version, include_cluster_authorized_operations=True,
                                 endpoint_type=BROKER_ENDPOINT))
    assert (answer.error_code, answer.cluster_id, answer.controller_id) == (ErrorCode.none, CLUSTER_ID, 0)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in answer.brokers] == [(0, HOST, PORT, None)]
    # asked for, with no authorizer: every operation of the cluster (Kafka's answer)
    assert answer.cluster_authorized_operations == ALL_CLUSTER_OPERATIONS
    if version >= 1:
        assert answer.endpoint_type == BROKER_ENDPOINT
    if version >= 2:
        assert [b.is_fenced for b in answer.brokers] == [False]


def test_describe_cluster_asked_for_controllers(broker):
    answer = broker.send(request(DESCRIBE_CLUSTER, 1, endpoint_type=CONTROLLER_ENDPOINT))
    assert answer.error_code == ErrorCode.mismatched_endpoint_type


# --- DescribeLogDirs -------------------------------------------------------------------------
def describe_log_dirs(broker, version: int, topics=None):
    """``topics``: {topic: [partition]}, None for all."""
    wanted = None if topics is None else [{"topic": t, "partitions": ps} for t, ps in topics.items()]
    return broker.send(request(DESCRIBE_LOG_DIRS, version, topics=wanted))


def sizes(result) -> dict:
    return {(t, p.partition_index): p.partition_size for t, p in flattened(result.topics)}


def segment_bytes(log_dir: str, topic: str, partition: int) -> int:
    path = os.path.join(log_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))


@pytest.mark.parametrize("version", [1, 4])
def test_describe_log_dirs(broker, version):
    broker.create_topic("t", 2)
    broker.create_topic("u")
    broker.produce("t", 1, b"x" * 500)
    answer = describe_log_dirs(broker, version)
    [result] = answer.results
    assert (result.error_code, result.log_dir) == (ErrorCode.none, broker.log_dir)
    assert sizes(result) == {("t", 0): 0, ("t", 1): segment_bytes(broker.log_dir, "t", 1), ("u", 0): 0}
    assert sizes(result)[("t", 1)] > 500
    assert all(p.offset_lag == 0 and not p.is_future_key for _t, p in flattened(result.topics))
    if version >= 3:
        assert answer.error_code == ErrorCode.none
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0


def test_describe_log_dirs_of_some_partitions(broker):
    broker.create_topic("t", 2)
    broker.create_topic("u")
    [result] = describe_log_dirs(broker, 4, {"t": [1, 7], "missing": [0]}).results
    assert list(sizes(result)) == [("t", 1)]


def test_a_log_dir_that_cannot_be_read(make_broker, tmp_path):
    good, gone = str(tmp_path / "good"), str(tmp_path / "gone")
    broker = make_broker({"log.dirs": f"{good},{gone}"})
    shutil.rmtree(gone)
    try:
        first, second = describe_log_dirs(broker, 4).results
    finally:
        os.makedirs(gone)  # the broker's own files, for its shutdown
    assert [(r.log_dir, r.error_code) for r in (first, second)] == [(good, ErrorCode.none),
                                                                    (gone, ErrorCode.kafka_storage_error)]
    assert (second.topics, second.total_bytes) == ((), -1)


# --- ElectLeaders ----------------------------------------------------------------------------
def elect(broker, version: int, partitions, election_type: int = PREFERRED):
    """``partitions``: {topic: [partition]}, None for all; [(topic, partition id, error name)]."""
    wanted = None if partitions is None else [{"topic": t, "partitions": ps} for t, ps in partitions.items()]
    answer = broker.send(request(ELECT_LEADERS, version, election_type=election_type, topic_partitions=wanted,
                                 timeout=1000))
    if version >= 1:
        assert answer.error_code == ErrorCode.none
    return [(t, p.partition_id, errors([p])[0]) for t, p in flattened(answer.replica_election_results,
                                                                       name="topic", partitions="partition_result")]


@pytest.mark.parametrize("version", [0, 2])
def test_every_partition_already_has_its_preferred_leader(broker, version):
    broker.create_topic("t", 2)
    assert elect(broker, version, {"t": [0, 1, 5], "missing": [0]}) == [
        ("t", 0, "election_not_needed"), ("t", 1, "election_not_needed"), ("t", 5, "unknown_topic_or_partition"),
        ("missing", 0, "unknown_topic_or_partition")]
    assert elect(broker, version, None) == []  # of all partitions, only those elected or failed are listed


def test_unclean_and_unknown_election_types(broker):
    broker.create_topic("t")
    assert elect(broker, 2, {"t": [0]}, UNCLEAN) == [("t", 0, "election_not_needed")]
    assert elect(broker, 2, {"t": [0]}, 7) == [("t", 0, "invalid_request")]


# --- Alter/ListPartitionReassignments ---------------------------------------------------------
def reassign(broker, version: int, moves: dict, allow_factor_change: bool = True):
    """``moves``: {(topic, partition): replicas or None}; [(topic, partition, error name)]."""
    topics: dict[str, list] = {}
    for (topic, partition), replicas in moves.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    answer = broker.send(request(ALTER_REASSIGNMENTS, version, timeout=1000,
                                 allow_replication_factor_change=allow_factor_change,
                                 topics=[{"name": t, "partitions": ps} for t, ps in topics.items()]))
    assert answer.error_code == ErrorCode.none
    if version >= 1:
        assert answer.allow_replication_factor_change == allow_factor_change
    found = flattened(answer.responses)
    assert all(p.error_message for _t, p in found if p.error_code != ErrorCode.none)
    return [(t, p.partition_index, errors([p])[0]) for t, p in found]


@pytest.mark.parametrize("version", [0, 1])
def test_a_standalone_broker_can_only_keep_its_replicas(broker, version):
    broker.create_topic("t", 2)
    assert reassign(broker, version, {("t", 0): [0], ("t", 1): [0, 1], ("missing", 0): [0]}) == [
        ("t", 0, "none"), ("t", 1, "invalid_replica_assignment"), ("missing", 0, "unknown_topic_or_partition")]
    assert reassign(broker, version, {("t", 0): None, ("t", 1): [], ("t", 5): [0]}) == [
        ("t", 0, "no_reassignment_in_progress"), ("t", 1, "invalid_replica_assignment"),
        ("t", 5, "unknown_topic_or_partition")]


@pytest.mark.parametrize("topics", [None, [{"name": "t", "partition_indexes": [0, 1]},
                                           {"name": "missing", "partition_indexes": [0]}]])
def test_no_reassignment_is_ever_in_progress(broker, topics):
    broker.create_topic("t", 2)
    reassign(broker, 1, {("t", 0): [0]})
    answer = broker.send(request(LIST_REASSIGNMENTS, 0, timeout=1000, topics=topics))
    assert (answer.error_code, answer.error_message, answer.topics) == (ErrorCode.none, None, ())
