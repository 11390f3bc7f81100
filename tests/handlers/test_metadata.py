"""Metadata (3): this broker for every partition, topics created on first
mention (or not), unknown topics by name and by id, topic ids from v10."""

import uuid

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import CLUSTER_ID, HOST, METADATA, PORT, errors, request


def metadata(broker, version: int, names=None, ids=None, **fields):
    """Metadata for ``names`` (and ``ids``, v12+); both None: every topic."""
    topics = None
    if names is not None or ids is not None:
        topics = [{"name": n, "topic_id": None} for n in names or ()] + \
                 [{"name": None, "topic_id": i} for i in ids or ()]
    return broker.send(request(METADATA, version, topics=topics, **fields))


def by_name(answer) -> dict:
    return {t.name: t for t in answer.topics}


@pytest.mark.parametrize("version", [1, 12])
def test_all_topics_with_this_broker_leading_every_partition(broker, version):
    broker.create_topic("a", 2)
    broker.create_topic("b", 1)
    answer = metadata(broker, version)
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(0, HOST, PORT)]
    assert answer.controller_id == 0
    assert getattr(answer, "cluster_id", CLUSTER_ID) == CLUSTER_ID  # v2+
    topics = by_name(answer)
    assert sorted(topics) == ["a", "b"]
    assert errors(topics["a"].partitions) == ["none", "none"]
    assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in topics["a"].partitions] == [(0, 0, (0,), (0,)), (1, 0, (0,), (0,))]
    assert not topics["a"].is_internal


def test_v0_asks_for_every_topic_with_an_empty_list(broker):
    broker.create_topic("a")
    assert sorted(by_name(metadata(broker, 0, names=[]))) == ["a"]
    assert len(metadata(broker, 1, names=[]).topics) == 0  # from v1 empty means none


@pytest.mark.parametrize("version", [0, 4, 12])
def test_an_unknown_topic_is_created_on_first_mention(make_broker, version):
    broker = make_broker({"num.partitions": 3})
    [topic] = metadata(broker, version, names=["fresh"]).topics
    assert topic.error_code == ErrorCode.none and topic.name == "fresh"
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert broker.topics.get("fresh").partitions == 3
    if version >= 10:
        assert topic.topic_id == broker.topic_id("fresh")


@pytest.mark.parametrize("version", [1, 12])
def test_auto_create_off_answers_unknown_topic(make_broker, version):
    broker = make_broker({"auto.create.topics.enable": False})
    [topic] = metadata(broker, version, names=["missing"]).topics
    assert (topic.error_code, topic.name, topic.partitions) == (ErrorCode.unknown_topic_or_partition, "missing", ())
    assert broker.topics.get("missing") is None


def test_a_client_may_refuse_auto_creation(broker):
    [topic] = metadata(broker, 4, names=["missing"], allow_auto_topic_creation=False).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert broker.topics.get("missing") is None


def test_an_illegal_name_is_not_created(broker):
    [topic] = metadata(broker, 9, names=["no spaces allowed"]).topics
    assert topic.error_code == ErrorCode.invalid_topic_exception
    assert broker.topics.all() == []


@pytest.mark.parametrize("version", [12, 13])
def test_topics_asked_by_id(broker, version):
    broker.create_topic("known", 2)
    known, stranger = broker.topic_id("known"), uuid.uuid4()
    found, unknown = metadata(broker, version, ids=[known, stranger]).topics
    assert (found.error_code, found.name, found.topic_id) == (ErrorCode.none, "known", known)
    assert len(found.partitions) == 2
    # an unknown id is echoed so the client can tell which one, with no name
    assert (unknown.error_code, unknown.name, unknown.topic_id) == (ErrorCode.unknown_topic_id, None, stranger)


def test_topic_ids_are_answered_from_v10_and_internal_topics_flagged(broker):
    broker.create_topic("t")
    broker.run(broker.groups.ensure_offsets_topic())
    topics = by_name(metadata(broker, 10))
    assert topics["t"].topic_id == broker.topic_id("t") and not topics["t"].is_internal
    assert topics["__consumer_offsets"].is_internal
    assert not hasattr(metadata(broker, 9).topics[0], "topic_id")
