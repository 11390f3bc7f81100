"""Kafka's ACL authorizer: whether a principal, from a host, may do an
operation on a resource, decided as Kafka's ``AclAuthorizer`` decides.

* A super user (``super.users``, ``User:admin;User:broker``) may do anything.
* The ACLs that apply to a resource are its literal ones, the literal ``*``
  ones of its type and every prefixed one whose prefix starts its name.  With
  none at all (for anyone), ``allow.everyone.if.no.acl.found`` decides
  (false by default: nobody but super users).
* A DENY for the principal (or ``User:*``), the host (or ``*``) and the
  operation (or ALL) wins over any ALLOW.
* An ALLOW of the operation (or ALL) allows it; so does an ALLOW of READ,
  WRITE, DELETE or ALTER for DESCRIBE, and of ALTER_CONFIGS for
  DESCRIBE_CONFIGS (Kafka's implied operations; a DENY implies nothing).

Answers are cached per (principal, host, operation, resource) until the ACLs
change; every request asks, most of them about the same few resources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hpbroker.security.acls import (
    OPERATIONS_OF,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)

# the authorizer class names Kafka's operators set; each is this one authorizer
KAFKA_AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                     "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
_IMPLIED = {Operation.DESCRIBE: (Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                 Operation.ALTER),
            Operation.DESCRIBE_CONFIGS: (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS)}
_CACHED = 100_000  # answers kept before the cache starts afresh


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:a;User:b``)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


class _TypeIndex:
    """One resource type's ACLs: literal names, the ``*`` wildcard, prefixes."""

    __slots__ = ("literal", "prefixed", "wildcard", "longest_prefix")

    def __init__(self):
        self.literal: dict[str, tuple[Entry, ...]] = {}
        self.prefixed: dict[str, tuple[Entry, ...]] = {}
        self.wildcard: tuple[Entry, ...] = ()
        self.longest_prefix = 0

    def add(self, resource: Resource, entries: Iterable[Entry]) -> None:
        entries = tuple(entries)
        if resource.pattern is PatternType.PREFIXED:
            self.prefixed[resource.name] = self.prefixed.get(resource.name, ()) + entries
            self.longest_prefix = max(self.longest_prefix, len(resource.name))
        elif resource.name == WILDCARD:
            self.wildcard += entries
        else:
            self.literal[resource.name] = self.literal.get(resource.name, ()) + entries

    def applying_to(self, name: str) -> list[Entry]:
        found = list(self.literal.get(name, ()))
        found.extend(self.wildcard)
        if self.prefixed:
            for end in range(1, min(len(name), self.longest_prefix) + 1):
                found.extend(self.prefixed.get(name[:end], ()))
        return found


class Authorizer:
    def __init__(self, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False):
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.version: object = None  # of the ACLs held: whoever feeds them decides what it is
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._cache: dict[tuple, bool] = {}
        self.broken = False  # the ACLs could not be read: nobody but the super users is allowed anything

    def configure(self, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._cache.clear()

    def load(self, acls: Mapping[Resource, Iterable[Entry]], version: object = None) -> None:
        """Hold these ACLs from now on."""
        index: dict[ResourceType, _TypeIndex] = {}
        for resource, entries in acls.items():
            index.setdefault(resource.kind, _TypeIndex()).add(resource, entries)
        self._index = index
        self.version = version
        self.broken = False
        self._cache.clear()

    def fail_closed(self) -> None:
        """The ACLs cannot be read: deny everyone but the super users until they are loaded."""
        self._index = {}
        self.version = None
        self.broken = True
        self._cache.clear()

    # --- deciding --------------------------------------------------------------------------------
    def allowed(self, principal: str, host: str, operation: Operation, kind: ResourceType, name: str) -> bool:
        key = (principal, host, operation, kind, name)
        answer = self._cache.get(key)
        if answer is None:
            answer = self._decide(principal, host, operation, kind, name)
            if len(self._cache) >= _CACHED:
                self._cache.clear()
            self._cache[key] = answer
        return answer

    def _decide(self, principal: str, host: str, operation: Operation, kind: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        if self.broken:
            return False
        index = self._index.get(kind)
        entries = index.applying_to(name) if index is not None else []
        if not entries:
            return self.allow_if_no_acl
        mine = [e for e in entries if e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)]
        if any(e.permission is Permission.DENY and e.operation in (operation, Operation.ALL) for e in mine):
            return False
        granting = _IMPLIED.get(operation, (operation,))
        return any(e.permission is Permission.ALLOW and (e.operation is Operation.ALL or e.operation in granting)
                   for e in mine)

    def allowed_on_some(self, principal: str, host: str, operation: Operation, kind: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of
        the type: an ALLOW of it that no DENY covers (Kafka's
        ``authorizeByResourceType``: an idempotent producer needs WRITE on some
        topic, or IDEMPOTENT_WRITE on the cluster)."""
        if principal in self.super_users:
            return True
        if self.broken:
            return False
        index = self._index.get(kind)
        if index is None:
            return self.allow_if_no_acl

        def mine(entries, permission):
            return any(e.permission is permission and e.operation in (operation, Operation.ALL)
                       and e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)
                       for e in entries)

        if mine(index.wildcard, Permission.DENY):
            return False
        denied_prefixes = [p for p, entries in index.prefixed.items() if mine(entries, Permission.DENY)]

        def covered(name: str) -> bool:
            return any(name.startswith(p) for p in denied_prefixes)

        if mine(index.wildcard, Permission.ALLOW):
            return True
        for name, entries in index.literal.items():
            if mine(entries, Permission.ALLOW) and not mine(entries, Permission.DENY) and not covered(name):
                return True
        return any(mine(entries, Permission.ALLOW) and not covered(prefix)
                   for prefix, entries in index.prefixed.items())

    def operations(self, principal: str, host: str, kind: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field: bit ``op`` set for each
        operation of the resource's type the principal may do on it."""
        bits = 0
        for operation in OPERATIONS_OF.get(kind, ()):
            if self.allowed(principal, host, operation, kind, name):
                bits |= 1 << operation
        return bits


def all_operations(kind: ResourceType) -> int:
    """The bit field with no authorizer: everything the type has."""
    bits = 0
    for operation in OPERATIONS_OF.get(kind, ()):
        bits |= 1 << operation
    return bits
