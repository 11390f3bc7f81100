"""Kafka's ZooKeeper layout: where each piece of cluster state lives, and its JSON.

The shapes are Kafka's, so ``zkCli.sh get /brokers/ids/1`` reads the same on a
hpbroker cluster as on a Kafka one.  Encoders write the version Kafka writes
today; decoders accept what older versions left behind (a missing key takes
its default) and raise ``ZnodeFormatError`` on anything else.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPIC_CONFIGS = "/config/topics"
USER_CONFIGS = "/config/users"  # a user's SCRAM credentials, as Kafka keeps them
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
# hpbroker's own: Kafka asks the controller with a ControlledShutdown request;
# here the request is an ephemeral znode the stopping broker creates (the
# controller acts on ZooKeeper only, and a broker that dies mid-shutdown
# withdraws its request by dying).
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"

# Persistent parents every broker makes sure of at start (Kafka's persistent paths).
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, "/config/changes", TOPIC_CONFIGS, DELETE_TOPICS,
                    ISR_CHANGE_NOTIFICATION, "/cluster", CONTROLLED_SHUTDOWN)

# Broker ids up to this are for operators; generated ids start above it.
RESERVED_BROKER_MAX_ID = 1000


class ZnodeFormatError(ValueError):
    """A znode's content is not the JSON Kafka's layout says it holds."""


def _load(path: str, data: bytes) -> dict:
    try:
        found = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZnodeFormatError(f"{path} does not hold JSON: {exc}") from None
    if not isinstance(found, dict):
        raise ZnodeFormatError(f"{path} holds {type(found).__name__}, not a JSON object")
    return found


def _dump(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


_T = TypeVar("_T")


def _field(path: str, obj: dict, key: str, kind: type[_T], default: _T | None = None) -> _T:
    value = obj.get(key, default)
    if value is None and default is None:
        raise ZnodeFormatError(f"{path} has no {key!r}")
    if kind is int and isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)  # Kafka writes some numbers as strings (timestamps)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ZnodeFormatError(f"{path}: {key!r} is {value!r}, expected {kind.__name__}")
    return cast(_T, value)  # checked just above


def _int_list(path: str, value) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ZnodeFormatError(f"{path}: expected a list of broker ids, got {value!r}")
    return value


# --- /cluster/id -------------------------------------------------------------------
def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _field(CLUSTER_ID, _load(CLUSTER_ID, data), "id", str)


# --- /brokers/ids/<id> --------------------------------------------------------------
def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


@dataclass(frozen=True)
class Endpoint:
    """One of a broker's listeners as its registration advertises it."""
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str  # host, port, listener and security_protocol: the endpoint the brokers meet on
    port: int
    rack: str | None = None
    listener: str = "PLAINTEXT"
    timestamp_ms: int = 0
    # The broker epoch (KIP-380): the zxid that created this registration, so a
    # broker that restarted, or re-registered after its session expired, has a
    # larger one than the incarnation before it.  Read from the znode's stat
    # (czxid), never written into it; -1 when not known.
    epoch: int = -1
    security_protocol: str = "PLAINTEXT"  # the listener's (listener_security_protocol_map)
    others: tuple[Endpoint, ...] = ()  # the broker's other listeners, for the clients that connect through them

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Every listener, the brokers' own first (so it is the first a reader finds)."""
        return (Endpoint(self.listener, self.host, self.port, self.security_protocol), *self.others)

    @property
    def endpoint(self) -> str:
        return str(self.endpoints[0])

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where the listener named ``listener`` is reached; None when the broker has no such listener."""
        for e in self.endpoints:
            if e.listener == listener:
                return e.host, e.port
        return None

    def encode(self) -> bytes:
        value = {
            "version": 5, "host": self.host, "port": self.port, "endpoints": [str(e) for e in self.endpoints],
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in self.endpoints},
            "jmx_port": -1, "timestamp": str(self.timestamp_ms), "features": {},
        }
        if self.rack is not None:
            value["rack"] = self.rack
        return _dump(value)

    @classmethod
    def decode(cls, broker_id: int, data: bytes, epoch: int = -1) -> "BrokerRegistration":
        path = broker_path(broker_id)
        obj = _load(path, data)
        protocols = obj.get("listener_security_protocol_map")
        protocols = protocols if isinstance(protocols, dict) else {}
        endpoints = []
        for text in obj.get("endpoints") or []:
            # "NAME://host:port" (host may be a bracketed IPv6 address)
            name, _, address = str(text).partition("://")
            host, _, port = address.rpartition(":")
            if not port.isdigit():
                raise ZnodeFormatError(f"{path}: endpoint {text!r} is not NAME://HOST:PORT")
            endpoints.append(Endpoint(name, host.strip("[]"), int(port), str(protocols.get(name, "PLAINTEXT"))))
        if not endpoints:  # version 1 registrations carry only host and port
            endpoints.append(Endpoint("PLAINTEXT", _field(path, obj, "host", str), _field(path, obj, "port", int)))
        rack = obj.get("rack")
        timestamp = _field(path, obj, "timestamp", int, 0)
        first = endpoints[0]
        return cls(broker_id, first.host, first.port, rack if isinstance(rack, str) else None, first.listener,
                   timestamp, epoch, first.security_protocol, tuple(endpoints[1:]))


# --- /controller, /controller_epoch ---------------------------------------------------
def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    return _field(CONTROLLER, _load(CONTROLLER, data), "brokerid", int)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    text = data.decode("ascii", "replace").strip()
    if not text.lstrip("-").isdigit():
        raise ZnodeFormatError(f"{CONTROLLER_EPOCH} holds {text!r}, not an integer")
    return int(text)


# --- /brokers/topics/<topic> ----------------------------------------------------------
def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's replica lists, partition -> broker ids (the first is the preferred leader)."""

    topic: str
    partitions: dict[int, list[int]]
    topic_id: str | None = None  # Kafka's UUID string form
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def keyed(replicas: dict[int, list[int]]) -> dict[str, list[int]]:
            return {str(p): list(brokers) for p, brokers in sorted(replicas.items())}
        value = {"version": 2, "partitions": keyed(self.partitions),
                 "adding_replicas": keyed(self.adding_replicas), "removing_replicas": keyed(self.removing_replicas)}
        if self.topic_id is not None:
            value["topic_id"] = self.topic_id
        return _dump(value)

    @classmethod
    def decode(cls, topic: str, data: bytes) -> "TopicAssignment":
        path = topic_path(topic)
        obj = _load(path, data)

        def keyed(name: str) -> dict[int, list[int]]:
            section = obj.get(name) or {}
            if not isinstance(section, dict) or not all(k.isdigit() for k in section):
                raise ZnodeFormatError(f"{path}: {name!r} is not a map of partition -> replicas")
            return {int(p): _int_list(path, brokers) for p, brokers in section.items()}

        topic_id = obj.get("topic_id")
        return cls(topic, keyed("partitions"), topic_id if isinstance(topic_id, str) else None,
                   keyed("adding_replicas"), keyed("removing_replicas"))


# --- /brokers/topics/<topic>/partitions/<p>/state ----------------------------------------
def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


@dataclass(frozen=True)
class PartitionState:
    """Leader and ISR as the controller last wrote them.  ``zk_version`` is the
    znode's version when read: every change is a set conditional on it, so two
    writers (an old and a new controller) cannot both win.  ``zxid`` is the
    zxid of that write (the stat's mzxid): an ISR member whose registration
    (``BrokerRegistration.epoch``) is newer than it registered after the ISR
    was decided, so it is another incarnation than the one judged in sync."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int = -1
    zxid: int = -1

    def registered_since(self, replica: int, brokers: dict) -> bool:
        """``replica`` registered after this state was written (``brokers``: id ->
        BrokerRegistration): it restarted, or its session expired, since."""
        registration = brokers.get(replica)
        return registration is not None and 0 <= self.zxid < registration.epoch

    def judged_in_sync(self, replica: int, brokers: dict) -> bool:
        """``replica`` is in the ISR in the incarnation that was judged in sync."""
        return replica in self.isr and replica in brokers and not self.registered_since(replica, brokers)

    def encode(self) -> bytes:
        return _dump({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                      "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def decode(cls, topic: str, partition: int, data: bytes, zk_version: int = -1, zxid: int = -1) -> "PartitionState":
        path = partition_state_path(topic, partition)
        obj = _load(path, data)
        return cls(_field(path, obj, "leader", int), _field(path, obj, "leader_epoch", int),
                   _int_list(path, obj.get("isr")), _field(path, obj, "controller_epoch", int), zk_version, zxid)


# --- /config/topics/<topic> ------------------------------------------------------------
def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def encode_topic_config(config: Mapping[str, object]) -> bytes:
    return _dump({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    return _decode_config(topic_config_path(topic), data)


def _decode_config(path: str, data: bytes) -> dict[str, str]:
    section = _load(path, data).get("config") or {}
    if not isinstance(section, dict):
        raise ZnodeFormatError(f"{path}: 'config' is not a map")
    return {str(k): str(v) for k, v in section.items()}


# --- /config/users/<user> ---------------------------------------------------------------
def user_config_path(user: str) -> str:
    """Kafka's sanitized name: the user name URL-encoded as Java's URLEncoder does
    (so ``/`` and the like cannot make a path; ``*`` and ``~`` too)."""
    quoted = urllib.parse.quote(user, safe="*-._")
    return f"{USER_CONFIGS}/{quoted.replace('*', '%2A').replace('~', '%7E')}"


def user_of_znode(name: str) -> str:
    return urllib.parse.unquote(name)


def encode_user_config(config: Mapping[str, object]) -> bytes:
    return encode_topic_config(config)  # the same shape: {"version": 1, "config": {...}}


def decode_user_config(user: str, data: bytes | None) -> dict[str, str]:
    """The user's settings; none when its znode is absent or empty."""
    return _decode_config(user_config_path(user), data) if data else {}


# --- /isr_change_notification/isr_change_<seq> ------------------------------------------
def encode_isr_change(partitions: list[tuple[str, int]]) -> bytes:
    return _encode_partition_list(partitions)


def decode_isr_change(data: bytes) -> list[tuple[str, int]]:
    return _partition_list(ISR_CHANGE_NOTIFICATION, data)


def _encode_partition_list(partitions: list[tuple[str, int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in sorted(set(partitions))]})


def _partition_list(path: str, data: bytes) -> list[tuple[str, int]]:
    entries = _load(path, data).get("partitions") or []
    try:
        return [(str(e["topic"]), int(e["partition"])) for e in entries]
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(f"{path}: entries are not topic/partition pairs") from None


# --- /admin/controlled_shutdown/<id> (hpbroker's own), /admin/preferred_replica_election -----
def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def encode_preferred_election(partitions: list[tuple[str, int]]) -> bytes:
    return _encode_partition_list(partitions)


def decode_preferred_election(data: bytes) -> list[tuple[str, int]]:
    return _partition_list(PREFERRED_REPLICA_ELECTION, data)


# --- reassignments: the target of a partition and Kafka's /admin/reassign_partitions ----------
# Kafka (KIP-455) keeps an ongoing reassignment in the topic znode itself: the
# partition's replicas are the target followed by the origin's other replicas,
# ``adding_replicas`` those of the target not in the origin, ``removing_replicas``
# those of the origin not in the target.  So a new controller finds every
# reassignment in progress where it finds the assignment.
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
# hpbroker's own, shaped as the preferred election's: partitions whose leader
# may be elected from outside the ISR (ElectLeaders with the unclean type).
UNCLEAN_LEADER_ELECTION = "/admin/unclean_leader_election"


def being_reassigned(assignment: TopicAssignment, partition: int) -> bool:
    return bool(assignment.adding_replicas.get(partition) or assignment.removing_replicas.get(partition))


def target_replicas(assignment: TopicAssignment, partition: int) -> list[int]:
    """Where the partition is headed: its replicas less those being removed."""
    removing = assignment.removing_replicas.get(partition, [])
    return [r for r in assignment.partitions[partition] if r not in removing]


def origin_replicas(assignment: TopicAssignment, partition: int) -> list[int]:
    """Where the partition was before its reassignment: its replicas less those being added."""
    adding = assignment.adding_replicas.get(partition, [])
    return [r for r in assignment.partitions[partition] if r not in adding]


def reassigned(assignment: TopicAssignment, partition: int, target: list[int]) -> TopicAssignment:
    """The assignment with ``partition`` headed for ``target`` from its origin
    (an ongoing reassignment is redirected; the origin as target cancels it)."""
    origin = origin_replicas(assignment, partition)
    replicas = list(dict.fromkeys([*target, *origin]))
    adding = [r for r in replicas if r not in origin]
    removing = [r for r in replicas if r not in target]
    return _with_partition(assignment, partition, replicas, adding, removing)


def reassignment_completed(assignment: TopicAssignment, partition: int) -> TopicAssignment:
    """The assignment with ``partition`` on its target alone, nothing added or removed."""
    return _with_partition(assignment, partition, target_replicas(assignment, partition), [], [])


def _with_partition(assignment: TopicAssignment, partition: int, replicas: list[int], adding: list[int],
                    removing: list[int]) -> TopicAssignment:
    def put(section: dict[int, list[int]], value: list[int]) -> dict[int, list[int]]:
        changed = {p: list(v) for p, v in section.items() if p != partition}
        if value:
            changed[partition] = list(value)
        return changed
    return TopicAssignment(assignment.topic, {**assignment.partitions, partition: list(replicas)},
                           assignment.topic_id, put(assignment.adding_replicas, adding),
                           put(assignment.removing_replicas, removing))


def encode_reassignment(entries: list[tuple[str, int, list[int]]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                               for t, p, r in entries]})


def decode_reassignment(data: bytes) -> list[tuple[str, int, list[int]]]:
    """(topic, partition, target replicas) of ``/admin/reassign_partitions``
    (the tool's optional ``log_dirs`` are ignored: one log dir choice per broker here)."""
    entries = _load(REASSIGN_PARTITIONS, data).get("partitions") or []
    if not isinstance(entries, list):
        raise ZnodeFormatError(f"{REASSIGN_PARTITIONS}: 'partitions' is not a list")
    found = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ZnodeFormatError(f"{REASSIGN_PARTITIONS}: entry {entry!r} is not an object")
        found.append((_field(REASSIGN_PARTITIONS, entry, "topic", str),
                      _field(REASSIGN_PARTITIONS, entry, "partition", int),
                      _int_list(REASSIGN_PARTITIONS, entry.get("replicas"))))
    return found


def encode_unclean_election(partitions: list[tuple[str, int]]) -> bytes:
    return _encode_partition_list(partitions)


def decode_unclean_election(data: bytes) -> list[tuple[str, int]]:
    return _partition_list(UNCLEAN_LEADER_ELECTION, data)


# --- /consumers/<group>/... (the ZooKeeper-coordinated consumer) ---------------------------
CONSUMERS = "/consumers"
# how a registration's subscription is to be read: topic names, or one regex over them
PATTERN_STATIC, PATTERN_WHITE_LIST, PATTERN_BLACK_LIST = "static", "white_list", "black_list"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_owners_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}"


def consumer_offsets_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}"


@dataclass(frozen=True)
class ConsumerRegistration:
    """``/consumers/<group>/ids/<consumer id>``: what the consumer reads.  With
    the static pattern ``subscription`` maps each topic to its stream count;
    with a white or black list it holds one regex (and its stream count)."""

    subscription: dict[str, int]
    pattern: str = PATTERN_STATIC
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        return _dump({"version": 1, "subscription": dict(sorted(self.subscription.items())),
                      "pattern": self.pattern, "timestamp": str(self.timestamp_ms)})

    @classmethod
    def decode(cls, path: str, data: bytes) -> "ConsumerRegistration":
        obj = _load(path, data)
        subscription = obj.get("subscription")
        if not isinstance(subscription, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in subscription.values()):
            raise ZnodeFormatError(f"{path}: 'subscription' is not a map of topic -> stream count")
        pattern = _field(path, obj, "pattern", str, PATTERN_STATIC)
        if pattern not in (PATTERN_STATIC, PATTERN_WHITE_LIST, PATTERN_BLACK_LIST):
            raise ZnodeFormatError(f"{path}: unknown pattern {pattern!r}")
        if pattern != PATTERN_STATIC and len(subscription) != 1:
            raise ZnodeFormatError(f"{path}: a {pattern} subscription holds one regex, not {len(subscription)}")
        return cls(dict(subscription), pattern, _field(path, obj, "timestamp", int, 0))


def encode_consumer_offset(offset: int) -> bytes:
    return str(offset).encode()  # a plain decimal string, as Kafka's ZooKeeper consumers write it


def decode_consumer_offset(path: str, data: bytes) -> int:
    text = data.decode("ascii", "replace").strip()
    if not text.lstrip("-").isdigit():
        raise ZnodeFormatError(f"{path} holds {text[:40]!r}, not an offset")
    return int(text)


# --- ACLs (Kafka's AclAuthorizer): one znode per resource pattern, its entries as JSON ---------
ACL_LITERAL = "/kafka-acl"  # /kafka-acl/<ResourceType>/<name>
ACL_PREFIXED = "/kafka-acl-extended/prefixed"  # /kafka-acl-extended/prefixed/<ResourceType>/<name>
ACL_LITERAL_CHANGES = "/kafka-acl-changes"  # acl_changes_<seq>: "TOPIC:<name>" (the type as Kafka's enum)
ACL_PREFIXED_CHANGES = "/kafka-acl-extended-changes"  # acl_changes_<seq>: the pattern as JSON
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_CHANGES_KEPT = 50  # notifications left behind a write; Kafka's brokers purge theirs after 15 minutes


def acl_root(prefixed: bool) -> str:
    return ACL_PREFIXED if prefixed else ACL_LITERAL


def acl_path(type_name: str, name: str, prefixed: bool) -> str:
    return f"{acl_root(prefixed)}/{type_name}/{name}"


def acl_change(enum_name: str, name: str, prefixed: bool) -> tuple[str, bytes]:
    """The notification Kafka's authorizer writes after changing a resource's
    ACLs (its parent, its data), the type named as Kafka's enum (``TOPIC``,
    ``TRANSACTIONAL_ID``)."""
    if not prefixed:
        return ACL_LITERAL_CHANGES, f"{enum_name}:{name}".encode()
    document = {"version": 1, "resourceType": enum_name, "name": name, "patternType": "PREFIXED"}
    return ACL_PREFIXED_CHANGES, json.dumps(document, separators=(",", ":")).encode()
