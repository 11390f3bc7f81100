"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44):
topic overrides in the registry, their sources, and what the broker refuses."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, errors, request

TOPIC, BROKER, UNKNOWN_TYPE = 2, 4, 99
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def describe(broker, version: int, *resources):
    """DescribeConfigs of (type, name[, keys]) resources; the results."""
    wanted = [{"resource_type": t, "resource_name": n, "configuration_keys": keys[0] if keys else None}
              for t, n, *keys in resources]
    return broker.send(request(DESCRIBE_CONFIGS, version, resources=wanted)).results


def entries(result) -> dict:
    return {c.name: (c.value, c.config_source) for c in result.configs}


def alter(broker, version: int, name: str, configs: dict, *, resource_type=TOPIC, validate_only=False):
    answer = broker.send(request(ALTER_CONFIGS, version, validate_only=validate_only, resources=[
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}]))
    [result] = answer.responses
    return result


def alter_incrementally(broker, version: int, name: str, *changes, resource_type=TOPIC, validate_only=False):
    """IncrementalAlterConfigs of (key, operation, value) changes to one resource."""
    answer = broker.send(request(INCREMENTAL_ALTER_CONFIGS, version, validate_only=validate_only, resources=[
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in changes]}]))
    [result] = answer.responses
    return result


def overrides(broker, name: str) -> dict:
    return broker.topics.get(name).configs


# --- DescribeConfigs --------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 4])
def test_a_topics_settings_with_their_sources(make_broker, version):
    broker = make_broker({"log.segment.bytes": 1 << 20})
    broker.create_topic("t", configs={"retention.ms": "60000"})
    [result] = describe(broker, version, (TOPIC, "t"))
    assert (result.error_code, result.resource_type, result.resource_name) == (ErrorCode.none, TOPIC, "t")
    found = entries(result)
    assert found["retention.ms"] == ("60000", TOPIC_CONFIG)
    assert found["segment.bytes"] == (str(1 << 20), STATIC_BROKER_CONFIG)
    assert found["cleanup.policy"] == ("delete", DEFAULT_CONFIG)
    assert not any(c.read_only or c.is_sensitive for c in result.configs)
    if version >= 3:
        kinds = {c.name: c.config_type for c in result.configs}
        long_, string, boolean = 5, 2, 1  # Kafka's ConfigType ids
        assert (kinds["retention.ms"], kinds["cleanup.policy"], kinds["preallocate"]) == (long_, string, boolean)


def test_only_the_keys_asked_for(broker):
    broker.create_topic("t")
    [result] = describe(broker, 4, (TOPIC, "t", ["retention.ms", "cleanup.policy", "no.such.key"]))
    assert sorted(entries(result)) == ["cleanup.policy", "retention.ms"]


@pytest.mark.parametrize("version", [1, 4])
def test_the_broker_resource(broker, version):
    by_id, by_default = describe(broker, version, (BROKER, "0"), (BROKER, ""))
    assert errors([by_id, by_default]) == ["none", "none"]
    found = entries(by_id)
    assert found["num.partitions"] == ("1", DEFAULT_CONFIG)
    assert found["log.dirs"] == (broker.log_dir, STATIC_BROKER_CONFIG)
    assert all(c.read_only for c in by_id.configs)


@pytest.mark.parametrize("version", [1, 4])
def test_describe_refusals(broker, version):
    missing, other_broker, odd = describe(broker, version, (TOPIC, "missing"), (BROKER, "7"), (UNKNOWN_TYPE, "x"))
    assert errors([missing, other_broker, odd]) == ["unknown_topic_or_partition", "invalid_request",
                                                    "invalid_request"]
    assert all(r.error_message and not r.configs for r in (missing, other_broker, odd))


# --- AlterConfigs ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 2])
def test_alter_configs_replaces_a_topics_overrides(broker, version):
    broker.create_topic("t", configs={"retention.ms": "60000", "cleanup.policy": "compact"})
    result = alter(broker, version, "t", {"segment.bytes": "1048576"})
    assert (result.error_code, result.resource_name, result.resource_type) == (ErrorCode.none, "t", TOPIC)
    assert overrides(broker, "t") == {"segment.bytes": "1048576"}
    found = entries(describe(broker, 4, (TOPIC, "t"))[0])
    assert found["segment.bytes"] == ("1048576", TOPIC_CONFIG)
    assert found["cleanup.policy"] == ("delete", DEFAULT_CONFIG)


def test_a_new_setting_reaches_the_open_log(broker):
    broker.create_topic("t")
    assert broker.produce("t", 0, b"x" * 2000).error_code == ErrorCode.none
    assert alter(broker, 2, "t", {"max.message.bytes": "1000"}).error_code == ErrorCode.none
    broker.tick()  # as the worker's next tick applies it
    assert broker.produce("t", 0, b"x" * 2000).error_code == ErrorCode.message_too_large
    assert broker.produce("t", 0, b"small").error_code == ErrorCode.none


@pytest.mark.parametrize("version", [0, 2])
def test_alter_configs_refusals(broker, version):
    broker.create_topic("t", configs={"retention.ms": "60000"})
    bad = alter(broker, version, "t", {"retention.ms": "soon"})
    unknown_key = alter(broker, version, "t", {"no.such.setting": "1"})
    missing = alter(broker, version, "missing", {"retention.ms": "1"})
    of_broker = alter(broker, version, "0", {"num.partitions": "3"}, resource_type=BROKER)
    assert errors([bad, unknown_key, missing, of_broker]) == ["invalid_config", "invalid_config",
                                                              "unknown_topic_or_partition", "invalid_request"]
    assert all(r.error_message for r in (bad, unknown_key, missing, of_broker))
    assert overrides(broker, "t") == {"retention.ms": "60000"}


def test_alter_configs_validate_only(broker):
    broker.create_topic("t", configs={"retention.ms": "60000"})
    assert alter(broker, 1, "t", {"retention.ms": "1"}, validate_only=True).error_code == ErrorCode.none
    assert alter(broker, 1, "t", {"retention.ms": "x"}, validate_only=True).error_code == ErrorCode.invalid_config
    assert alter(broker, 1, "nope", {}, validate_only=True).error_code == ErrorCode.unknown_topic_or_partition
    assert overrides(broker, "t") == {"retention.ms": "60000"}


# --- IncrementalAlterConfigs ------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_incremental_operations(broker, version):
    broker.create_topic("t", configs={"retention.ms": "60000", "segment.bytes": "1048576"})
    result = alter_incrementally(broker, version, "t", ("retention.ms", SET, "120000"), ("segment.bytes", DELETE, None),
                                 ("cleanup.policy", APPEND, "compact"), ("cleanup.policy", APPEND, "delete,compact"))
    assert (result.error_code, result.resource_name) == (ErrorCode.none, "t")
    assert overrides(broker, "t") == {"retention.ms": "120000", "cleanup.policy": "compact,delete"}
    assert alter_incrementally(broker, version, "t", ("cleanup.policy", SUBTRACT, "compact")).error_code \
        == ErrorCode.none
    assert overrides(broker, "t") == {"retention.ms": "120000", "cleanup.policy": "delete"}


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_refusals_change_nothing(broker, version):
    broker.create_topic("t", configs={"retention.ms": "60000"})
    odd_operation = alter_incrementally(broker, version, "t", ("retention.ms", SET, "1"), ("retention.ms", 9, "2"))
    bad_value = alter_incrementally(broker, version, "t", ("retention.ms", SET, "soon"))
    missing = alter_incrementally(broker, version, "missing", ("retention.ms", SET, "1"))
    of_broker = alter_incrementally(broker, version, "0", ("num.partitions", SET, "3"), resource_type=BROKER)
    assert errors([odd_operation, bad_value, missing, of_broker]) == [
        "invalid_request", "invalid_config", "unknown_topic_or_partition", "invalid_request"]
    assert overrides(broker, "t") == {"retention.ms": "60000"}


def test_incremental_validate_only(broker):
    broker.create_topic("t", configs={"retention.ms": "60000"})
    result = alter_incrementally(broker, 1, "t", ("retention.ms", DELETE, None), validate_only=True)
    assert result.error_code == ErrorCode.none
    assert overrides(broker, "t") == {"retention.ms": "60000"}


def test_a_batch_larger_than_a_segment_is_record_list_too_large(broker):
    # Kafka checks max.message.bytes per batch first, then the append against segment.bytes
    broker.create_topic("t", configs={"segment.bytes": "1024", "max.message.bytes": "1000000"})
    assert broker.produce("t", 0, b"x" * 2000).error_code == ErrorCode.record_list_too_large
    assert broker.produce("t", 0, b"small").error_code == ErrorCode.none
