"""Kafka's connection quotas as the acceptor keeps them: counts by address and
listener, the limits read from Kafka's names, and when a listener may accept."""

import math

import pytest

from hpbroker.acceptor.connection_quotas import ConnectionQuotas
from hpbroker.server.config import BrokerConfig
from hpbroker.server.connection_limits import UNLIMITED, ConnectionLimits
from hpbroker.storage.config import ConfigError

TWO = {"listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://127.0.0.1:19093",
       "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
       "inter.broker.listener.name": "INTERNAL"}


def limits(**settings) -> ConnectionLimits:
    return BrokerConfig.from_sources(overrides={**TWO, **settings}).connection_limits


def test_kafkas_names_and_defaults():
    assert limits() == ConnectionLimits(protected="INTERNAL")
    one = BrokerConfig.from_sources(overrides={"max.connections": "3"}).connection_limits
    assert one.protected == "" and one.max_connections == 3  # one listener: the broker's limit holds it too
    found = limits(**{"max.connections": "100", "max.connections.per.ip": "5",
                      "max.connections.per.ip.overrides": "127.0.0.2:7,localhost:9",
                      "max.connection.creation.rate": "50", "listener.name.external.max.connections": "20",
                      "listener.name.external.max.connection.creation.rate": "10"})
    assert (found.max_connections, found.per_ip, found.creation_rate) == (100, 5, 50)
    assert found.per_ip_overrides["127.0.0.2"] == 7 and found.per_ip_overrides["127.0.0.1"] == 9  # resolved
    assert found.listener_max == {"EXTERNAL": 20} and found.listener_rate == {"EXTERNAL": 10}


@pytest.mark.parametrize("settings, message", [
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "is not HOST:COUNT"),
    ({"max.connections.per.ip.overrides": "127.0.0.1:many"}, "expected a whole number"),
    ({"max.connections.per.ip.overrides": "no-such-host.invalid:3"}, "cannot resolve 'no-such-host.invalid'"),
    ({"max.connections.per.ip": "0"}, "refuses everyone"),
    ({"max.connections": "-1"}, "cannot be negative"),
    ({"listener.name.external.max.connections": "-2"}, "cannot be negative"),
    ({"listener.name.external.max.connectionz": "2"}, "unknown config key"),
])
def test_a_bad_limit_is_one_line(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_sources(overrides={**TWO, **settings}).validate()


def test_counts_by_address_and_listener():
    quotas = ConnectionQuotas(ConnectionLimits(per_ip=2, per_ip_overrides={"10.0.0.9": 0}, protected="INTERNAL"),
                              0.0)
    quotas.opened("10.0.0.1", "EXTERNAL")
    assert not quotas.ip_full("10.0.0.1")
    quotas.opened("10.0.0.1", "INTERNAL")
    assert quotas.ip_full("10.0.0.1") and not quotas.ip_full("10.0.0.2") and quotas.ip_full("10.0.0.9")
    quotas.closed("10.0.0.1", "EXTERNAL")
    assert not quotas.ip_full("10.0.0.1") and quotas.total == 1
    quotas.closed("10.0.0.1", "INTERNAL")
    quotas.closed("10.0.0.1", "INTERNAL")  # one close too many (a late report): never below zero
    assert quotas.total == 0 and not quotas.per_ip


def test_max_connections_holds_the_client_listeners_but_not_the_brokers():
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=2, listener_max={"INTERNAL": 3},
                                               protected="INTERNAL"), 0.0)
    quotas.opened("10.0.0.1", "EXTERNAL")
    quotas.opened("10.0.0.2", "INTERNAL")
    assert quotas.accept_wait("EXTERNAL", 0.0) == math.inf  # two connections: the broker's limit
    assert quotas.accept_wait("INTERNAL", 0.0) == 0  # the brokers' listener: only its own limit
    quotas.opened("10.0.0.3", "INTERNAL")
    quotas.opened("10.0.0.4", "INTERNAL")
    assert quotas.accept_wait("INTERNAL", 0.0) == math.inf  # its own limit, 3
    quotas.closed("10.0.0.4", "INTERNAL")
    quotas.closed("10.0.0.3", "INTERNAL")
    quotas.closed("10.0.0.2", "INTERNAL")
    assert quotas.accept_wait("EXTERNAL", 0.0) == 0


def test_creation_rate_spreads_a_burst_over_time():
    quotas = ConnectionQuotas(ConnectionLimits(creation_rate=4, listener_rate={"INTERNAL": 2},
                                               protected="INTERNAL"), 0.0)
    for _ in range(4):  # a second's worth at once
        assert quotas.accept_wait("EXTERNAL", 0.0) == 0
        quotas.accepted("EXTERNAL", 0.0)
    assert quotas.accept_wait("EXTERNAL", 0.0) == pytest.approx(0.25)  # one more every quarter second
    assert quotas.accept_wait("EXTERNAL", 0.25) == 0
    assert quotas.accept_wait("INTERNAL", 0.0) == 0  # the brokers' listener: only its own rate
    quotas.accepted("INTERNAL", 0.0)
    quotas.accepted("INTERNAL", 0.0)
    assert quotas.accept_wait("INTERNAL", 0.0) == pytest.approx(0.5)
    quotas.configure(ConnectionLimits(protected="INTERNAL"), 1.0)  # a reload lifts them; counts carry on
    assert quotas.accept_wait("INTERNAL", 1.0) == 0 and quotas.accept_wait("EXTERNAL", 1.0) == 0
    assert UNLIMITED == 2**31 - 1
