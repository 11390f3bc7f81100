"""The listener's security, read from Kafka's settings:

* ``listener.security.protocol.map`` names the listener's protocol
  (``SASL_PLAINTEXT://host:9092``, or ``CLIENTS://host:9092`` with
  ``CLIENTS:SASL_PLAINTEXT`` in the map): PLAINTEXT, SSL, SASL_PLAINTEXT or
  SASL_SSL;
* for SSL and SASL_SSL, the ``ssl.*`` settings (``tls.py``);
* ``sasl.enabled.mechanisms``, or ``listener.name.<listener>.sasl.enabled.mechanisms``;
* ``listener.name.<listener>.<mechanism>.sasl.jaas.config``: PLAIN's users
  (``user_<name>="<password>"``), and the broker's own ``username`` and
  ``password`` for the connections it opens to other brokers;
* ``sasl.mechanism.inter.broker.protocol``: the mechanism those use.

Every check is made when the configuration is read, so a broker that starts
can also log in to its peers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpbroker.security import jaas, scram
from hpbroker.security.tls import SSL_KEYS, TlsSettings, read as read_tls
from hpbroker.storage.config import ConfigError

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *scram.MECHANISMS)
# the listener-prefixed settings (Kafka's ``listener.name.<listener>.``); each checked where it is read
LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_.-]+?)\.(sasl\.enabled\.mechanisms|"
                          r"(?:plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.sasl\.jaas\.config|"
                          + "|".join(re.escape(key) for key in SSL_KEYS) + ")")


def is_security_key(key: str) -> bool:
    """A listener-prefixed setting, or one of the ``ssl.*`` settings (read by ``tls.py``)."""
    return key in SSL_KEYS or LISTENER_KEY.fullmatch(key) is not None


@dataclass(frozen=True)
class Login:
    """How this broker logs in to another: a mechanism, a user, a password."""
    mechanism: str
    user: str
    password: str


@dataclass(frozen=True)
class ListenerSecurity:
    listener: str  # its name, as in ``listeners``
    protocol: str  # one of PROTOCOLS
    mechanisms: tuple[str, ...] = ()  # enabled, in the order given
    plain_users: dict[str, str] = field(default_factory=dict)  # PLAIN's user -> password
    login: Login | None = None  # for the connections to the other brokers; None: none needed
    tls: TlsSettings | None = None  # SSL and SASL_SSL's

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)


def protocol_map(text: str) -> dict[str, str]:
    mapping = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, protocol = entry.partition(":")
        if not sep or protocol.strip().upper() not in PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {entry!r} is not LISTENER:PROTOCOL "
                              f"(protocols: {', '.join(PROTOCOLS)})")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def read(props: dict[str, str], listener: str, protocol_map_text: str, enabled_text: str,
         inter_broker_mechanism: str, logs_in: bool) -> ListenerSecurity:
    """The listener's security; ConfigError naming the setting at fault.  ``logs_in``: the
    brokers connect to each other through this listener, so this one needs its own login."""
    mapping = protocol_map(protocol_map_text)
    protocol = mapping.get(listener.upper())
    if protocol is None:
        raise ConfigError(f"listener {listener!r} has no security protocol: add {listener}:SASL_PLAINTEXT (or "
                          f"PLAINTEXT) to listener.security.protocol.map")
    encryption = read_tls(props, listener, sasl=protocol == SASL_SSL) if protocol in (SSL, SASL_SSL) else None
    if protocol in (PLAINTEXT, SSL):
        return ListenerSecurity(listener, protocol, tls=encryption)
    prefix = f"listener.name.{listener.lower()}."
    key = prefix + "sasl.enabled.mechanisms" if prefix + "sasl.enabled.mechanisms" in props \
        else "sasl.enabled.mechanisms"
    text = props.get(key, enabled_text)
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    if not mechanisms:
        raise ConfigError(f"{key}: a SASL listener needs at least one mechanism")
    unsupported = [m for m in mechanisms if m not in MECHANISMS]
    if unsupported:
        raise ConfigError(f"{key}: {unsupported[0]} is not supported (supported: {', '.join(MECHANISMS)})")
    entries = {}
    for mechanism in mechanisms:
        jaas_key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
        if jaas_key in props:
            entries[mechanism] = jaas.parse(props[jaas_key], jaas_key)
    plain_users: dict[str, str] = {}
    if PLAIN in mechanisms:
        entry = entries.get(PLAIN)
        if entry is None:
            raise ConfigError(f"PLAIN is enabled on listener {listener}: set {prefix}plain.sasl.jaas.config to "
                              f"a PlainLoginModule entry with its users (user_<name>=\"<password>\")")
        plain_users = entry.users()
    login = None
    if logs_in:  # the other brokers are reached through this listener: the broker logs in as they ask
        mechanism = inter_broker_mechanism.strip().upper()
        jaas_key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
        if mechanism not in mechanisms:
            raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not among the listener's "
                              f"enabled mechanisms ({', '.join(mechanisms)})")
        options = entries[mechanism].options if mechanism in entries else {}
        if not options.get("username") or "password" not in options:
            raise ConfigError(f"{jaas_key}: the broker logs in to the other brokers with {mechanism}: give its "
                              f"username=\"...\" password=\"...\"")
        login = Login(mechanism, options["username"], options["password"])
    return ListenerSecurity(listener, protocol, mechanisms, plain_users, login, encryption)
