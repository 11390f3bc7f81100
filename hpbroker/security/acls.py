"""Kafka's access control lists, as values: what an ACL says, how Kafka
numbers and names its parts, how a filter (DescribeAcls, DeleteAcls) picks
ACLs, and how one resource's ACLs are written in ZooKeeper.

An ACL binds a resource pattern (a type, a name, and whether the name is
taken literally, ``*`` meaning every name, or as a prefix) to an entry: a
principal (``User:alice``, ``User:*`` for everyone), a host (a client's IP
address, ``*`` for any), an operation and ALLOW or DENY.  What they decide is
``authorizer.py``'s.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

WILDCARD = "*"  # a literal resource name, principal or host that matches every one
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name, as Kafka spells it
WILDCARD_PRINCIPAL = "User:*"


class AclError(ValueError):
    """An ACL or filter Kafka would refuse (INVALID_REQUEST), or an unreadable stored one."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


# the names ZooKeeper's JSON and Kafka's tools use (kafka-acls --operation Read, ...)
RESOURCE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                  ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
                  ResourceType.USER: "User"}
OPERATION_NAMES = {Operation.ALL: "All", Operation.READ: "Read", Operation.WRITE: "Write", Operation.CREATE: "Create",
                   Operation.DELETE: "Delete", Operation.ALTER: "Alter", Operation.DESCRIBE: "Describe",
                   Operation.CLUSTER_ACTION: "ClusterAction", Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
                   Operation.ALTER_CONFIGS: "AlterConfigs", Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
                   Operation.CREATE_TOKENS: "CreateTokens", Operation.DESCRIBE_TOKENS: "DescribeTokens"}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}

# what each kind of resource can be asked for (Kafka's per-type operations): an
# ACL naming another is refused, and authorized-operation bit fields list these
OPERATIONS_OF = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


def _named(text: str, names: dict, what: str):
    """A resource type, operation or permission from its Kafka name, in any case
    and with or without underscores (``Read``, ``READ``; ``TransactionalId``,
    ``transactional_id``)."""
    wanted = text.strip().lower().replace("_", "").replace("-", "")
    for value, name in names.items():
        if name.lower() == wanted:
            return value
    raise AclError(f"no {what} named {text!r} (one of: {', '.join(names.values())})")


def resource_type_named(text: str) -> ResourceType:
    return _named(text, RESOURCE_NAMES, "resource type")


def operation_named(text: str) -> Operation:
    return _named(text, OPERATION_NAMES, "operation")


def permission_named(text: str) -> Permission:
    return _named(text, PERMISSION_NAMES, "permission")


@dataclass(frozen=True, order=True)
class Resource:
    """A resource pattern: a type, a name, LITERAL or PREFIXED."""
    kind: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def matches(self, name: str) -> bool:
        """Whether this pattern covers the resource of its type named ``name``."""
        if self.pattern is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def __str__(self) -> str:
        pattern = "" if self.pattern is PatternType.LITERAL else f" ({self.pattern.name.lower()})"
        return f"{RESOURCE_NAMES.get(self.kind, self.kind.name)}:{self.name}{pattern}"


@dataclass(frozen=True, order=True)
class Entry:
    """Who may (or may not) do what, from where."""
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def encode(self) -> dict:
        return {"principal": self.principal, "permissionType": PERMISSION_NAMES[self.permission],
                "operation": OPERATION_NAMES[self.operation], "host": self.host}

    @classmethod
    def decode(cls, item: dict) -> Entry:
        try:
            return cls(str(item["principal"]), str(item["host"]), operation_named(str(item["operation"])),
                       permission_named(str(item["permissionType"])))
        except (KeyError, TypeError) as exc:
            raise AclError(f"an ACL entry without {exc}") from None


@dataclass(frozen=True, order=True)
class Binding:
    resource: Resource
    entry: Entry


def validated(binding: Binding) -> Binding:
    """The binding as CreateAcls may store it, or AclError saying why not (Kafka's checks)."""
    resource, entry = binding.resource, binding.entry
    if resource.kind not in OPERATIONS_OF:
        raise AclError(f"resource type {resource.kind.name} cannot carry an ACL")
    if resource.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"pattern type {resource.pattern.name} names no resource: LITERAL or PREFIXED")
    if not resource.name:
        raise AclError("a resource name is needed")
    if resource.pattern is PatternType.PREFIXED and resource.name == WILDCARD:
        raise AclError("a prefixed resource cannot be '*' (a literal '*' matches every name)")
    if resource.kind is ResourceType.CLUSTER and resource.name != CLUSTER_NAME:
        raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}, not {resource.name!r}")
    if entry.permission not in (Permission.ALLOW, Permission.DENY):
        raise AclError(f"permission {entry.permission.name} is neither ALLOW nor DENY")
    if entry.operation != Operation.ALL and entry.operation not in OPERATIONS_OF[resource.kind]:
        raise AclError(f"operation {entry.operation.name} does not apply to a "
                       f"{RESOURCE_NAMES[resource.kind].lower()} resource")
    kind, colon, name = entry.principal.partition(":")
    if not colon or not kind or not name:
        raise AclError(f"principal {entry.principal!r} is not of the form Type:name (User:alice)")
    if not entry.host:
        raise AclError("a host is needed ('*' for any)")
    return binding


@dataclass(frozen=True)
class Filter:
    """What DescribeAcls and DeleteAcls pick: each part ANY (or None) matches
    everything; pattern MATCH picks the ACLs that would apply to the named
    resource (its literal ACLs, the literal '*' ones and every prefix of it)."""
    kind: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def check(self) -> Filter:
        for part, value in (("resource type", self.kind), ("pattern type", self.pattern),
                            ("operation", self.operation), ("permission", self.permission)):
            if value == 0:  # UNKNOWN: Kafka refuses a filter naming it
                raise AclError(f"the filter's {part} is UNKNOWN")
        return self

    def matches(self, binding: Binding) -> bool:
        resource, entry = binding.resource, binding.entry
        if self.kind != ResourceType.ANY and resource.kind != self.kind:
            return False
        if not self._pattern_matches(resource):
            return False
        if self.principal is not None and entry.principal != self.principal:
            return False
        if self.host is not None and entry.host != self.host:
            return False
        if self.operation != Operation.ANY and entry.operation != self.operation:
            return False
        return self.permission == Permission.ANY or entry.permission == self.permission

    def _pattern_matches(self, resource: Resource) -> bool:
        if self.pattern == PatternType.MATCH:
            return self.name is None or resource.matches(self.name)
        if self.pattern != PatternType.ANY and resource.pattern != self.pattern:
            return False
        return self.name is None or resource.name == self.name


# --- ZooKeeper's form: one znode per resource pattern ------------------------------------------
def encode_entries(entries) -> bytes:
    return json.dumps({"version": 1, "acls": [e.encode() for e in sorted(entries)]},
                      separators=(",", ":")).encode()


def decode_entries(data: bytes | None) -> frozenset[Entry]:
    """A resource znode's entries (AclError when its JSON is not Kafka's)."""
    if not data:
        return frozenset()
    try:
        document = json.loads(data)
        items = document["acls"]
    except (ValueError, KeyError, TypeError) as exc:
        raise AclError(f"not Kafka's ACL JSON: {exc}") from None
    return entries_of(items)


def entries_of(items) -> frozenset[Entry]:
    """A JSON list of entries, as a resource znode and the standalone file hold them."""
    if not isinstance(items, list):
        raise AclError("not Kafka's ACL JSON: 'acls' is not a list")
    return frozenset(Entry.decode(item) for item in items)
