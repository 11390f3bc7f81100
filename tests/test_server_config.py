"""The broker's configuration: Kafka's names, files, overrides, unknown keys."""

import os

import pytest

from hpbroker.server.config import BrokerConfig, parse_listener, parse_overrides, read_properties_file
from hpbroker.storage.config import ConfigError


def test_defaults_are_kafkas(tmp_path):
    config = BrokerConfig.from_sources(overrides={"log.dirs": str(tmp_path)})
    assert config["num.partitions"] == 1 and config["auto.create.topics.enable"] is True
    assert config["socket.request.max.bytes"] == 104857600
    assert config.log.segment_bytes == 1 << 30 and config.log_dirs == [str(tmp_path)]
    assert [(listener.host, listener.port) for listener in config.listeners] == [("127.0.0.1", 9092)]
    assert config.num_workers >= 1


def test_file_then_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# a comment\n! another\nlog.dirs=/var/lib/a,/var/lib/b\nnum.partitions : 3\n"
                    "log.segment.bytes 1048576\nlisteners=PLAINTEXT://0.0.0.0:9093\n\n")
    config = BrokerConfig.from_sources(file=str(path), overrides=parse_overrides(["num.partitions=5"]))
    assert config.log_dirs == ["/var/lib/a", "/var/lib/b"]
    assert config["num.partitions"] == 5 and config.log.segment_bytes == 1 << 20
    assert config.listeners[0].port == 9093 and config.listeners[0].host == "0.0.0.0"


def test_a_wildcard_listener_needs_an_advertised_address():
    """As in Kafka: nobody can connect to 0.0.0.0, so it is never what Metadata names."""
    for listeners in ("PLAINTEXT://0.0.0.0:9092", "PLAINTEXT://[::]:9092"):
        config = BrokerConfig.from_sources(overrides={"listeners": listeners})
        with pytest.raises(ConfigError, match="listeners .* cannot be advertised .* set advertised.listeners"):
            config.validate()
        advertised = BrokerConfig.from_sources(overrides={"listeners": listeners,
                                                          "advertised.listeners": "PLAINTEXT://10.0.0.7:9092"})
        advertised.validate()
        assert [(a.host, a.port) for a in advertised.advertised] == [("10.0.0.7", 9092)]
    with pytest.raises(ConfigError, match="advertised.listeners 0.0.0.0:9092 cannot be advertised"):
        BrokerConfig.from_sources(overrides={"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}).validate()
    everywhere = BrokerConfig.from_sources(overrides={"listeners": "PLAINTEXT://:9092"})
    everywhere.validate()  # no host: every interface, advertised under this machine's name
    assert everywhere.listeners[0].host == "" and everywhere.advertised[0].host not in ("", "0.0.0.0")


@pytest.mark.parametrize("overrides, message", [
    ({"log.segmnet.bytes": "1"}, "unknown config key 'log.segmnet.bytes'"),
    ({"num.partitions": "many"}, "invalid value 'many' for num.partitions"),
    ({"log.segment.bytes": "1"}, "must be at least"),
    ({"auto.create.topics.enable": "yes"}, "expected true or false"),
    ({"worker.cpu.affinity": "0,a"}, "worker.cpu.affinity: expected auto, none or a CPU list"),
    ({"worker.cpu.affinity": "1-0"}, "range 1-0 runs backwards"),
    ({"worker.cpu.affinity": "4096"}, "CPU 4096 is not among the CPUs this process may use"),
])
def test_bad_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_sources(overrides=overrides)


def test_listener_forms():
    assert parse_listener("PLAINTEXT://[::1]:9092").host == "::1"
    assert parse_listener("127.0.0.1:19092").port == 19092
    assert parse_listener("SASL_PLAINTEXT://h:1").name == "SASL_PLAINTEXT"  # its protocol is the map's
    for bad in ("h:port", "PLAINTEXT://h", "9X://h:1"):
        with pytest.raises(ConfigError):
            parse_listener(bad)
    with pytest.raises(ConfigError, match="serves TLS: set ssl.keystore.location"):
        BrokerConfig.from_sources(overrides={"listeners": "SSL://h:1"})


def test_several_listeners_each_with_its_security():
    """An internal PLAINTEXT listener the brokers meet on and an external SASL
    one for clients, as Kafka deployments often run; the registration carries both."""
    config = BrokerConfig.from_sources(overrides={
        "listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://:19093",
        "advertised.listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://broker.example:19093",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "zookeeper.connect": "127.0.0.1:2181",
        "listener.name.external.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_app="secret";'})
    config.validate()
    assert [(x.name, x.port) for x in config.listeners] == [("INTERNAL", 19092), ("EXTERNAL", 19093)]
    assert {name: s.protocol for name, s in config.securities.items()} == {"INTERNAL": "PLAINTEXT",
                                                                            "EXTERNAL": "SASL_PLAINTEXT"}
    assert config.inter_broker_listener == "INTERNAL" and config.security.protocol == "PLAINTEXT"
    assert config.securities["EXTERNAL"].login is None  # the brokers do not log in through it
    assert (config.inter_broker_endpoint.host, config.inter_broker_endpoint.port) == ("127.0.0.1", 19092)
    assert config.advertised[1].host == "broker.example"
    from hpbroker.acceptor.membership import member_settings
    settings = member_settings(config)
    assert (settings.listener, settings.port) == ("INTERNAL", 19092)
    assert [str(e) for e in settings.other_endpoints] == ["EXTERNAL://broker.example:19093"]
    # no inter-broker setting: Kafka's default protocol names the PLAINTEXT listener
    both = BrokerConfig.from_sources(overrides={"listeners": "SASL_PLAINTEXT://h:2,PLAINTEXT://h:1",
                                                "sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    assert both.inter_broker_listener == "PLAINTEXT"
    by_protocol = BrokerConfig.from_sources(overrides={
        "listeners": "A://h:1,B://h:2", "listener.security.protocol.map": "A:PLAINTEXT,B:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256", "security.inter.broker.protocol": "SASL_PLAINTEXT"})
    assert by_protocol.inter_broker_listener == "B"


@pytest.mark.parametrize("overrides, message", [
    ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "PLAINTEXT is given twice"),
    ({"listeners": "PLAINTEXT://h:1,SASL_PLAINTEXT://h:1"}, "a port of its own"),
    ({"listeners": "PLAINTEXT://h:0,SASL_PLAINTEXT://h:1"}, "a port of its own"),
    ({"listeners": "A://h:1,B://h:2", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"},
     "name the one the brokers connect to each other through with inter.broker.listener.name"),
    ({"listeners": "A://h:1", "listener.security.protocol.map": "A:PLAINTEXT", "inter.broker.listener.name": "B"},
     "inter.broker.listener.name=B: no such listener"),
    ({"listeners": "A://h:1,B://h:2", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT",
      "inter.broker.listener.name": "B", "advertised.listeners": "A://h:1"}, "advertised.listeners has no B"),
    ({"advertised.listeners": "OTHER://h:1"}, "OTHER is not one of the listeners"),
    ({"listeners": "A://h:1", "listener.security.protocol.map": "A:PLAINTEXT", "inter.broker.listener.name": "A",
      "security.inter.broker.protocol": "PLAINTEXT"}, "not both"),
    ({"listeners": "A://h:1,B://h:2", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "more than one listener has that protocol"),
    ({"listeners": "PLAINTEXT://h:1,C://h:2"}, "listener 'C' has no security protocol"),
])
def test_listener_mistakes_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_sources(overrides=overrides).validate()


def test_overrides_need_an_equals_sign():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["num.partitions"])


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        read_properties_file(str(tmp_path / "nope.properties"))


def test_worker_cpus_follow_worker_cpu_affinity():
    usable = sorted(os.sched_getaffinity(0))

    def cpus(**settings):
        return BrokerConfig.from_sources(overrides={"num.workers": "3", **settings}).worker_cpus

    assert cpus() == [usable[i % len(usable)] for i in range(3)]  # auto: one usable CPU each, wrapping
    assert cpus(**{"worker.cpu.affinity": "none"}) == [None, None, None]
    assert cpus(**{"worker.cpu.affinity": f"{usable[0]}"}) == [usable[0]] * 3
    first, last = usable[0], usable[-1]
    listed = [last, first] if last != first else [first]  # in the order given, each once
    assert cpus(**{"worker.cpu.affinity": f"{last}-{last},{first}"}) == [listed[i % len(listed)] for i in range(3)]
