"""FindCoordinator (10): this broker coordinates every group and every
transactional id; the offsets and transaction state topics are made on the
first lookup."""

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import OFFSETS_TOPIC, TRANSACTION_TOPIC
from tests.handlers.conftest import FIND_COORDINATOR, HOST, OFFSETS_PARTITIONS, PORT, errors, request

GROUP, TRANSACTION = 0, 1


def find(broker, version: int, *keys, key_type: int = GROUP):
    """v0-v3: one key, the answer itself; v4+: the coordinators."""
    answer = broker.send(request(FIND_COORDINATOR, version, key=keys[0], coordinator_keys=keys, key_type=key_type))
    return answer.coordinators if version >= 4 else answer


def node(found) -> tuple:
    return found.node_id, found.host, found.port


@pytest.mark.parametrize("version", [0, 3])
def test_a_groups_coordinator_is_this_broker(broker, version):
    assert broker.topics.get(OFFSETS_TOPIC) is None
    found = find(broker, version, "group-a")
    assert (found.error_code, node(found)) == (ErrorCode.none, (0, HOST, PORT))
    if version >= 1:
        assert found.error_message is None
    offsets = broker.topics.get(OFFSETS_TOPIC)
    assert offsets.partitions == OFFSETS_PARTITIONS and offsets.configs["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", [4, 6])
def test_batched_keys(broker, version):
    found = find(broker, version, "group-a", "group-b")
    assert [f.key for f in found] == ["group-a", "group-b"]
    assert errors(found) == ["none", "none"]
    assert [node(f) for f in found] == [(0, HOST, PORT)] * 2


@pytest.mark.parametrize("version", [1, 6])
def test_a_transactional_ids_coordinator_is_this_broker(broker, version):
    assert broker.topics.get(TRANSACTION_TOPIC) is None
    found = find(broker, version, "tx-1", "tx-2", key_type=TRANSACTION)
    for one in found if version >= 4 else [found]:
        assert (one.error_code, node(one)) == (ErrorCode.none, (0, HOST, PORT))
    state = broker.topics.get(TRANSACTION_TOPIC)
    assert state.partitions == 50 and state.configs["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", [1, 4])
def test_an_unknown_key_type(broker, version):
    found = find(broker, version, "x", key_type=7)
    one = found[0] if version >= 4 else found
    assert (one.error_code, one.node_id) == (ErrorCode.invalid_request, -1)


def test_no_coordinator_while_the_offsets_topic_cannot_be_made(broker):
    broker.create_topic("__consumer.offsets")  # collides with __consumer_offsets in metric names
    found = find(broker, 3, "group-a")
    assert (found.error_code, found.node_id) == (ErrorCode.coordinator_not_available, -1)
    assert broker.topics.get(OFFSETS_TOPIC) is None
