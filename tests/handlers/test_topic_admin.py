"""CreateTopics (19), CreatePartitions (37) and DeleteTopics (20), standalone:
the registry's directories are the truth the answers are checked against."""

import uuid

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, METADATA, errors, request


def create(broker, version: int, *topics, validate_only: bool = False):
    """CreateTopics of ``topics``: (name, partitions[, configs]) or dicts; the results."""
    wanted = []
    for t in topics:
        if isinstance(t, dict):
            wanted.append(t)
            continue
        name, partitions, *configs = t
        wanted.append({"name": name, "num_partitions": partitions, "replication_factor": -1,
                       "configs": [{"name": k, "value": v} for k, v in (configs[0] if configs else {}).items()]})
    answer = broker.send(request(CREATE_TOPICS, version, topics=wanted, timeout=5000, validate_only=validate_only))
    return answer.topics


def create_partitions(broker, version: int, name: str, count: int, **fields):
    answer = broker.send(request(CREATE_PARTITIONS, version, timeout=5000,
                                 topics=[{"name": name, "count": count, "assignments": None}], **fields))
    [result] = answer.results
    return result


def delete(broker, version: int, names=(), ids=()):
    topics = [{"name": n, "topic_id": None} for n in names] + [{"name": None, "topic_id": i} for i in ids]
    return broker.send(request(DELETE_TOPICS, version, topic_names=list(names), topics=topics,
                               timeout=5000)).responses


def partition_count(broker, name: str) -> int | None:
    info = broker.topics.get(name)
    return None if info is None else info.partitions


# --- CreateTopics --------------------------------------------------------------------------
@pytest.mark.parametrize("version", [2, 7])
def test_create_topics(broker, version):
    made, defaulted = create(broker, version, ("orders", 4, {"retention.ms": "1000"}), ("plain", -1))
    assert errors([made, defaulted]) == ["none", "none"]
    assert (partition_count(broker, "orders"), partition_count(broker, "plain")) == (4, 1)
    assert broker.topics.get("orders").configs == {"retention.ms": "1000"}
    if version >= 5:  # the effective settings, partitions and factor are echoed
        assert (made.num_partitions, made.replication_factor) == (4, 1)
        echoed = {c.name: (c.value, c.config_source) for c in made.configs}
        assert echoed["retention.ms"] == ("1000", 1)  # TOPIC_CONFIG
        assert echoed["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
    if version >= 7:
        assert made.topic_id == broker.topic_id("orders")


def test_a_replica_assignment_naming_this_broker_sets_the_partition_count(broker):
    [made] = create(broker, 7, {"name": "assigned", "num_partitions": -1, "replication_factor": -1,
                                "assignments": [{"partition_index": p, "broker_ids": [0]} for p in range(3)]})
    assert made.error_code == ErrorCode.none and partition_count(broker, "assigned") == 3


@pytest.mark.parametrize("version", [2, 7])
def test_refused_topics_each_get_their_error_and_the_others_are_made(broker, version):
    broker.create_topic("taken")
    results = create(broker, version,
                     ("taken", 1), ("zero", 0), ("negative", -5), ("bad name", 1),
                     ("bad-config", 1, {"retention.ms": "soon"}), ("unknown-config", 1, {"no.such.setting": "1"}),
                     {"name": "three-copies", "num_partitions": 1, "replication_factor": 3},
                     {"name": "elsewhere", "num_partitions": -1, "replication_factor": -1,
                      "assignments": [{"partition_index": 0, "broker_ids": [5]}]},
                     ("fine", 2))
    assert errors(results) == ["topic_already_exists", "invalid_partitions", "invalid_partitions",
                               "invalid_topic_exception", "invalid_config", "invalid_config",
                               "invalid_replication_factor", "invalid_replication_factor", "none"]
    assert all(r.error_message for r in results[:-1])
    assert sorted(t.name for t in broker.topics.all()) == ["fine", "taken"]
    if version >= 5:
        assert (results[0].num_partitions, results[0].replication_factor) == (-1, -1)


def test_validate_only_answers_without_creating(broker):
    [checked, refused] = create(broker, 7, ("maybe", 3), ("nope", 0), validate_only=True)
    assert errors([checked, refused]) == ["none", "invalid_partitions"]
    assert checked.num_partitions == 3
    assert broker.topics.all() == []


def test_names_that_collide_in_metrics_are_refused(broker):
    broker.create_topic("a.b")
    [clash] = create(broker, 7, ("a_b", 1))
    assert clash.error_code == ErrorCode.invalid_topic_exception


def test_a_topic_named_twice_in_one_request_is_an_invalid_request(broker):
    results = create(broker, 7, ("twice", 1), ("twice", 2))
    assert errors(results) == ["invalid_request", "invalid_request"]
    assert broker.topics.get("twice") is None


# --- CreatePartitions ----------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 3])
def test_create_partitions_grows_a_topic(broker, version):
    broker.create_topic("grow", 1)
    broker.produce("grow", 0, b"kept")
    result = create_partitions(broker, version, "grow", 3)
    assert (result.error_code, result.error_message) == (ErrorCode.none, None)
    assert partition_count(broker, "grow") == 3
    [topic] = broker.send(request(METADATA, 9, topics=[{"name": "grow"}])).topics
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert broker.produce("grow", 2, b"new").error_code == ErrorCode.none
    assert broker.read("grow", 0) == (ErrorCode.none, [b"kept"])


@pytest.mark.parametrize("version", [0, 3])
def test_create_partitions_refusals(broker, version):
    broker.create_topic("two", 2)
    same, fewer = (create_partitions(broker, version, "two", n) for n in (2, 1))
    assert errors([same, fewer]) == ["invalid_partitions", "invalid_partitions"]
    missing = create_partitions(broker, version, "missing", 4)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition and missing.error_message
    assert partition_count(broker, "two") == 2


def test_create_partitions_validate_only(broker):
    broker.create_topic("stay", 1)
    result = create_partitions(broker, 3, "stay", 5, validate_only=True)
    assert result.error_code == ErrorCode.none
    assert partition_count(broker, "stay") == 1


def test_create_partitions_refuses_an_assignment_to_an_unknown_broker(broker):
    broker.create_topic("moved", 1)
    answer = broker.send(request(CREATE_PARTITIONS, 3, timeout=5000, validate_only=False, topics=[
        {"name": "moved", "count": 2, "assignments": [{"broker_ids": [7]}]}]))
    assert answer.results[0].error_code == ErrorCode.invalid_replica_assignment
    assert partition_count(broker, "moved") == 1


# --- DeleteTopics --------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 6])
def test_delete_topics_by_name(broker, version):
    broker.create_topic("doomed", 2, {"retention.ms": "1000"})
    broker.create_topic("kept")
    old_id = broker.topic_id("doomed")
    broker.produce("doomed", 1, b"gone")
    [result] = delete(broker, version, names=["doomed"])
    assert (result.name, result.error_code) == ("doomed", ErrorCode.none)
    if version >= 6:
        assert result.topic_id == old_id
    assert [t.name for t in broker.topics.all()] == ["kept"]
    assert broker.produce("doomed", 1, b"again").error_code == ErrorCode.unknown_topic_or_partition
    # the same name made again is a new topic: a new id, no records, no old overrides
    broker.create_topic("doomed", 2)
    assert broker.topic_id("doomed") != old_id and broker.topics.get("doomed").configs == {}
    assert broker.read("doomed", 1) == (ErrorCode.none, [])


def test_delete_topics_by_id(broker):
    broker.create_topic("by-id")
    topic_id, stranger = broker.topic_id("by-id"), uuid.uuid4()
    found, unknown = delete(broker, 6, ids=[topic_id, stranger])
    assert (found.name, found.topic_id, found.error_code) == ("by-id", topic_id, ErrorCode.none)
    assert (unknown.topic_id, unknown.error_code) == (stranger, ErrorCode.unknown_topic_id)
    assert broker.topics.get("by-id") is None


@pytest.mark.parametrize("version", [1, 6])
def test_deleting_an_unknown_topic(broker, version):
    [result] = delete(broker, version, names=["never"])
    assert (result.name, result.error_code) == ("never", ErrorCode.unknown_topic_or_partition)


@pytest.mark.parametrize("version", [1, 6])
def test_deletion_disabled(make_broker, version):
    broker = make_broker({"delete.topic.enable": False})
    broker.create_topic("stays")
    [result] = delete(broker, version, names=["stays"])
    assert result.error_code == ErrorCode.topic_deletion_disabled
    assert broker.topics.get("stays") is not None
