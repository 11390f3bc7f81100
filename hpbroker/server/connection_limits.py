"""The connection limits' settings, as Kafka names them (the acceptor keeps
the counts: ``acceptor/connection_quotas.py``)."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field

from hpbroker.storage.config import ConfigError

UNLIMITED = 2147483647  # Kafka's default for each of them
# the per-listener forms (Kafka's ``listener.name.<listener>.`` prefix)
LISTENER_LIMIT_KEY = re.compile(r"listener\.name\.[a-z0-9_]+\.(?:max\.connections|max\.connection\.creation\.rate)")


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = UNLIMITED
    per_ip: int = UNLIMITED
    per_ip_overrides: dict[str, int] = field(default_factory=dict)  # address -> its limit
    creation_rate: int = UNLIMITED
    listener_max: dict[str, int] = field(default_factory=dict)  # listener name -> its max.connections
    listener_rate: dict[str, int] = field(default_factory=dict)  # listener name -> its creation rate
    # the brokers' listener, when there are others: held only by its own limits (Kafka's
    # "protected" listener); a broker with one listener holds it to the broker's limits too
    protected: str = ""

    @classmethod
    def read(cls, config) -> "ConnectionLimits":
        """From a BrokerConfig; ConfigError naming the setting at fault."""
        names = [listener.name for listener in config.listeners]
        listener_max, listener_rate = {}, {}
        for name in names:
            for key, found in (("max.connections", listener_max), ("max.connection.creation.rate", listener_rate)):
                prefixed = f"listener.name.{name.lower()}.{key}"
                if prefixed in config.props:
                    found[name] = _count(prefixed, config.props[prefixed])
        per_ip = config["max.connections.per.ip"]
        overrides = parse_ip_overrides(config["max.connections.per.ip.overrides"] or "")
        if per_ip == 0 and not overrides:
            raise ConfigError("max.connections.per.ip=0 refuses everyone: give max.connections.per.ip.overrides "
                              "for the addresses that may connect")
        for key in ("max.connections", "max.connections.per.ip", "max.connection.creation.rate"):
            if config[key] < 0:
                raise ConfigError(f"{key} cannot be negative")
        return cls(config["max.connections"], per_ip, overrides, config["max.connection.creation.rate"],
                   listener_max, listener_rate, config.inter_broker_listener if len(names) > 1 else "")


def _count(key: str, text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"invalid value {text!r} for {key}: expected a whole number") from None
    if value < 0:
        raise ConfigError(f"{key} cannot be negative")
    return value


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``host:count,...``; a host name is looked up now, as Kafka does."""
    found: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        host, sep, count = entry.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"max.connections.per.ip.overrides: {entry!r} is not HOST:COUNT")
        limit = _count("max.connections.per.ip.overrides", count)
        host = host.strip("[]")
        try:
            addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        except OSError as exc:
            raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}") from None
        for address in addresses:
            found[address] = limit
    return found


