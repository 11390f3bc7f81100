"""The broker's configuration: Kafka's ``server.properties`` names and defaults.

Sources, later ones winning: built-in defaults, a properties file (``--config``),
``--set key=value`` overrides.  Every key must be known: a typo is an error
naming the key, never a silently ignored setting.  Log settings
(``log.segment.bytes``, ``log.flush.interval.messages``, ...) are validated by
``hpbroker.storage.LogConfig``; the rest are the broker's own.
"""

import functools
import os
import re
import socket
from dataclasses import dataclass, field

from hpbroker.security import settings
from hpbroker.security.authorizer import KAFKA_AUTHORIZERS
from hpbroker.security.tls import SSL_KEYS
from hpbroker.server.connection_limits import LISTENER_LIMIT_KEY, UNLIMITED, ConnectionLimits
from hpbroker.storage.config import LOG_KEYS, ConfigError, LogConfig, is_broker_log_key, parse_bool


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def parse_cpu_affinity(text: str) -> str | tuple[int, ...]:
    """``auto`` (worker i on the i-th usable CPU), ``none`` (workers not pinned:
    the kernel places them), or a CPU list as taskset takes it (``0,2-3``;
    worker i on the i-th CPU listed, wrapping round).  Listed CPUs must be
    usable by this process: a typo would otherwise pin every worker nowhere."""
    text = str(text).strip().lower()
    if text in ("auto", "none"):
        return text
    cpus: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError("expected auto, none or a CPU list such as 0,2-3")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"range {part.strip()} runs backwards")
        cpus.extend(cpu for cpu in range(first, last + 1) if cpu not in cpus)
    unusable = sorted(set(cpus) - os.sched_getaffinity(0))
    if unusable:
        raise ValueError(f"CPU {unusable[0]} is not among the CPUs this process may use "
                         f"({','.join(map(str, sorted(os.sched_getaffinity(0))))})")
    return tuple(cpus)


# key -> (parser, default); a default of None means "derived" (see BrokerConfig).
BROKER_KEYS = {
    "listeners": (str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": (str, None),
    # Kafka's default map: PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL (security/settings.py)
    "listener.security.protocol.map": (str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                            "SASL_SSL:SASL_SSL"),
    # Kafka's default for both is GSSAPI (Kerberos), which is not served: PLAIN is the one
    # mechanism that needs nothing but the listener's JAAS entry
    "sasl.enabled.mechanisms": (str, "PLAIN"),
    "sasl.mechanism.inter.broker.protocol": (str, "PLAIN"),
    # Kafka's default is PLAINTEXT (the listener of that name); unset here, one listener needs no naming
    "security.inter.broker.protocol": (str, None),
    "sasl.server.max.receive.size": (int, 524288),  # the largest frame before the login
    "connection.failed.authentication.delay.ms": (int, 100),
    "connections.max.reauth.ms": (int, 0),  # re-authentication (KIP-368) is not served: only 0
    # ACLs (security/authorizer.py): empty is no authorization, as in Kafka; Kafka's
    # AclAuthorizer (or StandardAuthorizer, or the old SimpleAclAuthorizer) is the one served
    "authorizer.class.name": (str, ""),
    "super.users": (str, ""),  # principals allowed everything, separated by ';'
    "allow.everyone.if.no.acl.found": (parse_bool, False),
    # connection quotas (server/connection_limits.py); each also per listener, but per.ip
    "max.connections": (int, UNLIMITED),
    "max.connections.per.ip": (int, UNLIMITED),
    "max.connections.per.ip.overrides": (str, None),
    "max.connection.creation.rate": (int, UNLIMITED),
    "log.dirs": (str, None),
    "log.dir": (str, "/tmp/kafka-logs"),
    "broker.id": (int, 0),
    "node.id": (int, None),
    "num.workers": (int, None),
    # auto: worker i pinned to the i-th usable CPU; none: not pinned (several
    # brokers sharing a host's CPUs); or a CPU list such as 0,2-3
    "worker.cpu.affinity": (parse_cpu_affinity, "auto"),
    "auto.create.topics.enable": (parse_bool, True),
    "num.partitions": (int, 1),
    "default.replication.factor": (int, 1),
    "socket.request.max.bytes": (int, 104857600),
    # Kafka's default is 102400; -1 (the kernel's autotuning) moves more bytes per
    # sendfile on fast links, so it is ours.
    "socket.send.buffer.bytes": (int, -1),
    "socket.receive.buffer.bytes": (int, -1),
    "delete.topic.enable": (parse_bool, True),
    "log.retention.check.interval.ms": (int, 300000),
    # Accepted as Kafka spells it; the workers check flush.ms every 100 ms anyway.
    "log.flush.scheduler.interval.ms": (int, (1 << 63) - 1),
    "log.flush.offset.checkpoint.interval.ms": (int, 60000),
    "offsets.topic.num.partitions": (int, 50),
    "offsets.topic.replication.factor": (int, 3),  # capped by the live brokers (standalone: 1)
    "offsets.retention.minutes": (int, 10080),
    "group.initial.rebalance.delay.ms": (int, 3000),
    "group.min.session.timeout.ms": (int, 6000),
    "group.max.session.timeout.ms": (int, 1800000),
    # the consumer protocol's (KIP-848): its members' session and heartbeat are the coordinator's
    "group.consumer.session.timeout.ms": (int, 45000),
    "group.consumer.heartbeat.interval.ms": (int, 5000),
    "group.consumer.max.size": (int, 2147483647),
    "transaction.state.log.num.partitions": (int, 50),
    "transaction.state.log.replication.factor": (int, 3),  # capped by the live brokers, as the offsets topic's
    "transaction.state.log.min.isr": (int, 2),  # capped by the topic's replication factor
    "transactional.id.expiration.ms": (int, 604800000),
    "transaction.max.timeout.ms": (int, 900000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (int, 10000),
    "transaction.state.log.segment.bytes": (int, 104857600),
    "zookeeper.connect": (str, ""),
    "zookeeper.session.timeout.ms": (int, 18000),
    "zookeeper.connection.timeout.ms": (int, None),  # None: the session timeout, as in Kafka
    # Cluster mode (all ignored standalone).
    "broker.id.generation.enable": (parse_bool, True),
    "reserved.broker.max.id": (int, 1000),
    "broker.rack": (str, None),
    "inter.broker.listener.name": (str, None),
    "replica.lag.time.max.ms": (int, 30000),
    "replica.fetch.wait.max.ms": (int, 500),
    "replica.fetch.min.bytes": (int, 1),
    "replica.fetch.max.bytes": (int, 1048576),
    "replica.fetch.response.max.bytes": (int, 10485760),
    "replica.fetch.backoff.ms": (int, 1000),
    "replica.high.watermark.checkpoint.interval.ms": (int, 5000),
    "num.replica.fetchers": (int, 1),
    "auto.leader.rebalance.enable": (parse_bool, True),
    "leader.imbalance.check.interval.seconds": (int, 300),
    "leader.imbalance.per.broker.percentage": (int, 10),
    "controlled.shutdown.enable": (parse_bool, True),
    "controlled.shutdown.max.retries": (int, 3),
    "controlled.shutdown.retry.backoff.ms": (int, 5000),
    "worker.heartbeat.interval.ms": (int, 1000),
    "worker.heartbeat.timeout.ms": (int, 30000),
    "shutdown.timeout.ms": (int, 30000),
    # a client connection moves to the worker that owns the partitions of its last
    # this many requests (all one worker's, not its own); 0: never (workers/affinity.py)
    "connection.move.after.requests": (int, 8),
    # a standalone partition moves to the worker that forwarded this many appends
    # to it, when nobody else wrote it of late; 0: never (workers/partition_moves.py)
    "partition.move.after.appends": (int, 16),
    # connections whose writes span several workers' partitions gather on one worker (and the
    # partitions follow them) while all workers' CPU together is under this share of one core;
    # 0: never (workers/gathering.py)
    "connection.gather.max.cpu.percent": (int, 150),
    # a worker that used this share of its core for three heartbeats while another worker's core was
    # mostly idle hands back what gathered on it, and nothing gathers for five minutes (workers/gathering.py)
    "connection.gather.spread.cpu.percent": (int, 90),
    "metrics.listen": (str, ""),
}


def known_keys() -> list[str]:
    """Every key a broker's configuration may name: its own, TLS's (read by
    ``security.tls``, each also per listener), and the log settings at broker
    level and at topic level (one registry: ``BROKER_KEYS`` here and storage's
    ``LOG_KEYS``, which only the log settings' module may hold)."""
    return [*BROKER_KEYS, *SSL_KEYS, *(k.broker_key for k in LOG_KEYS),
            *(k.topic_key for k in LOG_KEYS if k.topic_key)]


def read_properties_file(path: str) -> dict[str, str]:
    r"""Java properties as Kafka's files use them: ``key=value`` (or ``key: value``,
    ``key value``), ``#``/``!`` comments, blank lines, and a line ending in ``\``
    going on on the next (as a long ``sasl.jaas.config`` is often written)."""
    props = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    number = 0
    while number < len(lines):
        first, raw = number + 1, lines[number]
        number += 1
        line = raw.lstrip()
        if not line or line[0] in "#!":
            continue
        while _continued(line) and number < len(lines):
            line = line[:-1] + lines[number].lstrip()
            number += 1
        if _continued(line):  # the file ends on a continued line: what it holds still counts, as in Java
            line = line[:-1]
        line = line.strip()
        for i, ch in enumerate(line):
            if ch in "=: \t":
                key, value = line[:i].strip(), line[i + 1 :].strip()
                break
        else:
            key, value = line, ""
        if not key:
            raise ConfigError(f"{path}:{first}: no key in {raw!r}")
        props[key] = value
    return props


def _continued(line: str) -> bool:
    r"""An odd count of backslashes ends the line (``\\`` is a backslash, and
    ``\ `` with a space after it ends nothing)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        props[key.strip()] = value.strip()
    return props


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


WILDCARD_HOSTS = ("0.0.0.0", "::")


def parse_listener(text: str) -> Listener:
    """``NAME://host:port``, or ``host:port`` (PLAINTEXT); the name's security
    protocol is ``listener.security.protocol.map``'s.  An empty host
    (``PLAINTEXT://:9092``) binds every interface, as in Kafka."""
    text = text.strip()
    name, sep, rest = text.partition("://")
    if not sep:
        name, rest = "PLAINTEXT", text
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise ConfigError(f"listener {text!r}: a listener's name is letters, digits and '_'")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"listener {text!r}: expected HOST:PORT")
    return Listener(name.upper(), host.strip("[]"), int(port))


def parse_listeners(text: str, key: str) -> tuple[Listener, ...]:
    """A comma-separated list of listeners, each name once (``key`` names the setting in errors)."""
    found = tuple(parse_listener(part) for part in text.split(",") if part.strip())
    if not found:
        raise ConfigError(f"{key} is empty")
    names = [listener.name for listener in found]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ConfigError(f"{key}: listener {twice} is given twice; each listener has its own name")
    return found


@dataclass(frozen=True)
class BrokerConfig:
    props: dict = field(default_factory=dict)  # every key given, as text
    values: dict = field(default_factory=dict)  # broker keys, parsed, defaults filled in
    log: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def from_sources(cls, *, file: str | None = None, overrides: dict | None = None) -> "BrokerConfig":
        props = read_properties_file(file) if file else {}
        props.update(overrides or {})
        values = {}
        for key, text in props.items():
            if key in BROKER_KEYS:
                parse = BROKER_KEYS[key][0]
                try:
                    values[key] = parse(text) if parse is not int else int(str(text).strip())
                except (TypeError, ValueError) as exc:
                    raise ConfigError(f"invalid value {text!r} for {key}: {exc}") from None
            elif not (is_broker_log_key(key) or settings.is_security_key(key) or LISTENER_LIMIT_KEY.fullmatch(key)):
                raise ConfigError(f"unknown config key {key!r}")
        for key, (_, default) in BROKER_KEYS.items():
            values.setdefault(key, default)
        config = cls(props=props, values=values, log=LogConfig.from_broker_properties(props))
        config.securities  # noqa: B018 -- checked now: a broker that starts can log its clients and peers in
        return config

    def __getitem__(self, key: str):
        return self.values[key]

    @property
    def log_dirs(self) -> list[str]:
        text = self.values["log.dirs"] or self.values["log.dir"]
        return [d.strip() for d in text.split(",") if d.strip()]

    @property
    def broker_id(self) -> int:
        node = self.values["node.id"]
        return self.values["broker.id"] if node is None else node

    @functools.cached_property
    def listeners(self) -> tuple[Listener, ...]:
        """What the broker binds, in the order given.  Each has its own port: a
        connection's listener is known by the port it came in on."""
        found = parse_listeners(self.values["listeners"], "listeners")
        if len(found) > 1:
            ports = [listener.port for listener in found]
            if 0 in ports or len(set(ports)) < len(ports):
                raise ConfigError(f"listeners {self.values['listeners']}: give each listener a port of its own")
        return found

    @functools.cached_property
    def inter_broker_listener(self) -> str:
        """The listener the brokers connect to each other through:
        ``inter.broker.listener.name``, else the listener named after
        ``security.inter.broker.protocol`` (or the one listener with that
        protocol), else the only listener, else the one named PLAINTEXT (Kafka's
        default protocol)."""
        names = [listener.name for listener in self.listeners]
        chosen, protocol = self.values["inter.broker.listener.name"], self.values["security.inter.broker.protocol"]
        if chosen is not None and protocol is not None:
            raise ConfigError("set inter.broker.listener.name or security.inter.broker.protocol, not both")
        if chosen is not None:
            name = chosen.strip().upper()
            if name not in names:
                raise ConfigError(f"inter.broker.listener.name={chosen}: no such listener (listeners: "
                                  f"{', '.join(names)})")
        elif protocol is not None:
            wanted = protocol.strip().upper()
            named = [n for n in names if n == wanted] or [n for n in names if self.protocol_of(n) == wanted]
            if len(named) != 1:
                raise ConfigError(f"security.inter.broker.protocol={protocol}: "
                                  f"{'no' if not named else 'more than one'} listener has that protocol; name the "
                                  f"brokers' listener with inter.broker.listener.name")
            name = named[0]
        elif len(names) == 1:
            name = names[0]
        elif "PLAINTEXT" in names:
            name = "PLAINTEXT"
        else:
            raise ConfigError(f"listeners {', '.join(names)}: name the one the brokers connect to each other "
                              f"through with inter.broker.listener.name")
        if name not in (listener.name for listener in self._advertised_as_given()):
            raise ConfigError(f"advertised.listeners has no {name}, the listener the brokers connect through")
        return name

    def protocol_of(self, listener: str) -> str | None:
        return settings.protocol_map(self.values["listener.security.protocol.map"]).get(listener)

    @functools.cached_property
    def securities(self) -> dict[str, settings.ListenerSecurity]:
        """Each listener's security protocol and, for SASL, its mechanisms and
        users; for TLS, its keys and certificates."""
        clustered = bool(self.values["zookeeper.connect"])
        inter_broker = self.inter_broker_listener
        found = {listener.name: settings.read(self.props, listener.name,
                                              self.values["listener.security.protocol.map"],
                                              self.values["sasl.enabled.mechanisms"],
                                              self.values["sasl.mechanism.inter.broker.protocol"],
                                              logs_in=clustered and listener.name == inter_broker)
                 for listener in self.listeners}
        if self.values["connections.max.reauth.ms"] != 0:
            raise ConfigError("connections.max.reauth.ms: re-authentication is not supported (only 0)")
        return found

    @property
    def security(self) -> settings.ListenerSecurity:
        """The security of the listener the brokers connect to each other through."""
        return self.securities[self.inter_broker_listener]

    @functools.cached_property
    def advertised(self) -> tuple[Listener, ...]:
        """What Metadata (and the broker's registration) tells clients and other
        brokers to connect to: ``advertised.listeners``, else the listeners,
        each name one of the listeners'.  As in Kafka, a listener with no host
        advertises this machine's name, and a wildcard address cannot be
        advertised: nobody can connect to it."""
        key = "advertised.listeners" if self.values["advertised.listeners"] else "listeners"
        found = []
        for listener in self._advertised_as_given():
            if listener.host in WILDCARD_HOSTS:
                raise ConfigError(f"{key} {listener.host}:{listener.port} cannot be advertised (no client can "
                                  f"connect to a wildcard address): set advertised.listeners to this broker's "
                                  f"reachable address, e.g. {listener.name}://{socket.getfqdn()}:{listener.port}")
            found.append(listener if listener.host else Listener(listener.name, socket.getfqdn(), listener.port))
        return tuple(found)

    def _advertised_as_given(self) -> tuple[Listener, ...]:
        text = self.values["advertised.listeners"]
        if not text:
            return self.listeners
        given = parse_listeners(text, "advertised.listeners")
        names = [listener.name for listener in self.listeners]
        stranger = next((a.name for a in given if a.name not in names), None)
        if stranger is not None:
            raise ConfigError(f"advertised.listeners: {stranger} is not one of the listeners ({', '.join(names)})")
        return given

    @property
    def inter_broker_endpoint(self) -> Listener:
        """Where the other brokers reach this one."""
        return next(a for a in self.advertised if a.name == self.inter_broker_listener)

    @functools.cached_property
    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits.read(self)

    @property
    def worker_cpus(self) -> list[int | None]:
        """The CPU each worker pins itself to, by index (None: not pinned);
        as many entries as workers."""
        setting = self.values["worker.cpu.affinity"]
        if setting == "none":
            return [None] * self.num_workers
        cpus = sorted(os.sched_getaffinity(0)) if setting == "auto" else list(setting)
        return [cpus[i % len(cpus)] for i in range(self.num_workers)]

    @property
    def num_workers(self) -> int:
        n = self.values["num.workers"]
        return _usable_cores() if n is None else n

    def validate(self) -> None:
        if self.num_workers < 1:
            raise ConfigError("num.workers must be at least 1")
        if self.values["num.partitions"] < 1:
            raise ConfigError("num.partitions must be at least 1")
        if not self.log_dirs:
            raise ConfigError("log.dirs is empty")
        connect = self.values["zookeeper.connect"]
        if connect and not connect.strip().partition("/")[0]:
            raise ConfigError(f"zookeeper.connect {connect!r} names no server: "
                              "expected host:port[,host:port...][/chroot]")
        self.inter_broker_endpoint  # noqa: B018 -- parses the listeners, refuses a wildcard that would be advertised
        self.connection_limits  # noqa: B018 -- resolves the per-address overrides
        authorizer = self.values["authorizer.class.name"].strip()
        if authorizer and authorizer not in KAFKA_AUTHORIZERS:
            raise ConfigError(f"authorizer.class.name {authorizer!r} is not served: hpbroker has Kafka's ACL "
                              f"authorizer ({KAFKA_AUTHORIZERS[0]}), or none (empty)")
        if self.values["metrics.listen"]:
            parse_listener(self.values["metrics.listen"])
