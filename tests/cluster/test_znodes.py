"""The znode JSON reads what Kafka writes and writes what Kafka reads."""

import json

import pytest

from hpbroker.cluster import znodes

# As a Kafka 3.x broker registers itself (version 5).
KAFKA_BROKER = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                b'"endpoints":["PLAINTEXT://broker-2.example:9092"],"jmx_port":-1,"port":9092,'
                b'"host":"broker-2.example","version":5,"timestamp":"1700000000000","rack":"r2"}')


def test_a_kafka_broker_registration_decodes():
    found = znodes.BrokerRegistration.decode(2, KAFKA_BROKER)
    assert found == znodes.BrokerRegistration(2, "broker-2.example", 9092, "r2", "PLAINTEXT", 1700000000000)


def test_a_version_1_registration_with_host_and_port_only_decodes():
    found = znodes.BrokerRegistration.decode(0, b'{"version":1,"host":"h","port":9093,"jmx_port":-1}')
    assert (found.host, found.port, found.listener) == ("h", 9093, "PLAINTEXT")


def test_our_registration_carries_every_field_kafka_tools_read():
    written = json.loads(znodes.BrokerRegistration(7, "127.0.0.1", 19092, "r1", timestamp_ms=5).encode())
    assert written == {"version": 5, "host": "127.0.0.1", "port": 19092, "endpoints": ["PLAINTEXT://127.0.0.1:19092"],
                       "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}, "jmx_port": -1,
                       "timestamp": "5", "features": {}, "rack": "r1"}
    assert "rack" not in json.loads(znodes.BrokerRegistration(7, "h", 1).encode())


def test_ipv6_endpoint():
    data = b'{"version":5,"endpoints":["PLAINTEXT://[::1]:9092"],"host":"::1","port":9092}'
    assert znodes.BrokerRegistration.decode(1, data).host == "::1"


def test_a_broker_with_several_listeners_registers_each():
    """The brokers' listener first (its host and port are the top-level ones),
    then the clients' others, each with its protocol."""
    registration = znodes.BrokerRegistration(
        3, "10.0.0.3", 9092, listener="INTERNAL", security_protocol="PLAINTEXT",
        others=(znodes.Endpoint("EXTERNAL", "::1", 9093, "SASL_SSL"),))
    written = json.loads(registration.encode())
    assert written["endpoints"] == ["INTERNAL://10.0.0.3:9092", "EXTERNAL://[::1]:9093"]
    assert written["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SASL_SSL"}
    found = znodes.BrokerRegistration.decode(3, registration.encode())
    assert found == registration
    assert found.address("EXTERNAL") == ("::1", 9093) and found.address("OTHER") is None


def test_topic_assignment_round_trip_and_kafka_form():
    kafka = (b'{"version":2,"partitions":{"0":[1,2,3],"1":[2,3,1]},"adding_replicas":{},'
             b'"removing_replicas":{},"topic_id":"f5mAxJ2nRm2W7HnS1ElGag"}')
    found = znodes.TopicAssignment.decode("orders", kafka)
    assert found.partitions == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert found.topic_id == "f5mAxJ2nRm2W7HnS1ElGag"
    assert znodes.TopicAssignment.decode("orders", found.encode()) == found
    # written before topic ids (version 1): no topic_id, no reassignment sections
    old = znodes.TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[0]}}')
    assert (old.partitions, old.topic_id, old.adding_replicas) == ({0: [0]}, None, {})


def test_partition_state_round_trip():
    state = znodes.PartitionState(leader=2, leader_epoch=5, isr=[2, 1], controller_epoch=3, zk_version=9)
    data = state.encode()
    assert json.loads(data) == {"version": 1, "leader": 2, "leader_epoch": 5, "isr": [2, 1], "controller_epoch": 3}
    assert znodes.PartitionState.decode("t", 0, data, zk_version=9) == state
    assert znodes.partition_state_path("t", 4) == "/brokers/topics/t/partitions/4/state"


def test_controller_cluster_id_config_and_isr_change():
    assert znodes.decode_controller(znodes.encode_controller(3, 10)) == 3
    assert znodes.decode_controller(b'{"version":2,"brokerid":1,"timestamp":"1","kraftControllerEpoch":-1}') == 1
    assert znodes.decode_controller_epoch(znodes.encode_controller_epoch(12)) == 12
    assert json.loads(znodes.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert znodes.decode_cluster_id(b'{"version":"1","id":"xyz"}') == "xyz"
    assert znodes.decode_topic_config("t", znodes.encode_topic_config({"retention.ms": 5})) == {"retention.ms": "5"}
    changes = [("b", 1), ("a", 0), ("a", 0)]
    assert znodes.decode_isr_change(znodes.encode_isr_change(changes)) == [("a", 0), ("b", 1)]


@pytest.mark.parametrize("decode, data", [
    (lambda d: znodes.decode_cluster_id(d), b"not json"),
    (lambda d: znodes.decode_cluster_id(d), b'["a"]'),
    (lambda d: znodes.decode_controller(d), b'{"brokerid":"one"}'),
    (lambda d: znodes.decode_controller(d), b'{"brokerid":true}'),
    (lambda d: znodes.decode_controller_epoch(d), b"x1"),
    (lambda d: znodes.PartitionState.decode("t", 0, d),
     b'{"leader":1,"leader_epoch":0,"isr":"1,2","controller_epoch":1}'),
    (lambda d: znodes.PartitionState.decode("t", 0, d), b'{"leader_epoch":0,"isr":[1],"controller_epoch":1}'),
    (lambda d: znodes.TopicAssignment.decode("t", d), b'{"partitions":{"zero":[1]}}'),
    (lambda d: znodes.BrokerRegistration.decode(1, d), b'{"endpoints":["PLAINTEXT://host"]}'),
    (lambda d: znodes.decode_isr_change(d), b'{"partitions":[{"topic":"t"}]}'),
    (lambda d: znodes.decode_cluster_id(d), b"\xff\xfe"),
])
def test_malformed_znodes_are_a_format_error_naming_the_path(decode, data):
    with pytest.raises(znodes.ZnodeFormatError, match="/"):
        decode(data)
