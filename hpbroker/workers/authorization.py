"""What a handler asks before it acts: may this connection's principal, from
its host, do this operation on this resource?  (``ctx.access``.)

With no ``authorizer.class.name`` every answer is yes and nothing is looked
up.  With Kafka's ACL authorizer configured, the worker holds every ACL in
memory (``security/authorizer.py``) and keeps it current: standalone by
reading the ACL file again when another worker's change counter moved, in
a cluster from each new cluster image whose ACLs changed.

The principal is the SASL login's (``User:<name>``), else the client
certificate's on an SSL listener (``ssl.principal.mapping.rules``), else
``User:ANONYMOUS``; the host is the client's IP address.  A denial is
logged as Kafka's authorizer log says it (principal, operation, resource,
host), at most once a minute for the same one.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable

from hpbroker.security.acl_store import AclStoreError
from hpbroker.security.acls import CLUSTER_NAME, OPERATION_NAMES, RESOURCE_NAMES, Operation, ResourceType
from hpbroker.security.authorizer import Authorizer, all_operations, parse_super_users
from hpbroker.security.principal_rules import ANONYMOUS
from hpbroker.security.sasl import SESSION
from hpbroker.server.logging_setup import Throttled
from hpbroker.workers.client_identity import CLIENT_HOST, CLIENT_IP, PRINCIPAL

log = logging.getLogger("hpbroker.authorizer")
_denials = Throttled(log)
_problems = Throttled(log)

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def principal() -> str:
    session = SESSION.get()
    if session is not None:
        return session.principal or ANONYMOUS
    return PRINCIPAL.get()


def client_ip() -> str:
    """The client's address as Kafka's ACLs name hosts (its connection works it out once)."""
    return CLIENT_IP.get() or acl_host(CLIENT_HOST.get().lstrip("/"))


def acl_host(address: str) -> str:
    """An IP address in Java's form, as Kafka compares ACL hosts: IPv6
    uncompressed (``0:0:0:0:0:0:0:1``, not ``::1``), an IPv4-mapped one as
    the IPv4 address it maps."""
    if ":" not in address:
        return address
    try:
        parsed = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return ":".join(f"{int(group, 16):x}" for group in parsed.exploded.split(":"))


def authorizer_for(config) -> Authorizer | None:
    """The authorizer ``authorizer.class.name`` asks for (None: none)."""
    if not config["authorizer.class.name"]:
        return None
    return Authorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])


class Access:
    def __init__(self, authorizer: Authorizer | None = None, refresh: Callable[[Authorizer], None] | None = None):
        self.authorizer = authorizer
        self._refresh = refresh  # standalone: reads the ACLs again if another worker changed them

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def configure(self, config) -> None:
        """A reload: new super users and no-ACL default (the authorizer itself needs a restart)."""
        if self.authorizer is not None:
            self.authorizer.configure(parse_super_users(config["super.users"]),
                                      config["allow.everyone.if.no.acl.found"])

    def _current(self) -> Authorizer:
        authorizer = self.authorizer
        assert authorizer is not None
        if self._refresh is not None:
            self._refresh(authorizer)
        return authorizer

    def allowed(self, operation: Operation, kind: ResourceType, name: str, *, quiet: bool = False) -> bool:
        """Whether the request may do ``operation`` on the resource; a denial is
        logged unless ``quiet`` (a resource merely left out of a listing)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        if self._refresh is not None:
            self._refresh(authorizer)
        who, host = principal(), client_ip()
        if authorizer.allowed(who, host, operation, kind, name):
            return True
        if not quiet:
            _denials.log(logging.INFO, (who, host, operation, kind, name),
                         "Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s", who,
                         OPERATION_NAMES.get(operation, operation.name), host, RESOURCE_NAMES.get(kind, kind.name),
                         name)
        return False

    def cluster(self, operation: Operation) -> bool:
        return self.allowed(operation, CLUSTER, CLUSTER_NAME)

    def topic(self, operation: Operation, name: str, *, quiet: bool = False) -> bool:
        return self.allowed(operation, TOPIC, name, quiet=quiet)

    def group(self, operation: Operation, name: str) -> bool:
        return self.allowed(operation, GROUP, name)

    def transactional_id(self, operation: Operation, name: str) -> bool:
        return self.allowed(operation, TRANSACTIONAL_ID, name)

    def topics(self, operation: Operation, names: Iterable[str], *, quiet: bool = False) -> set[str]:
        """Those of ``names`` the request may do ``operation`` on."""
        names = set(names)
        if self.authorizer is None:
            return names
        return {name for name in names if self.allowed(operation, TOPIC, name, quiet=quiet)}

    def on_some(self, operation: Operation, kind: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type."""
        if self.authorizer is None:
            return True
        return self._current().allowed_on_some(principal(), client_ip(), operation, kind)

    def operations(self, kind: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field for the resource."""
        if self.authorizer is None:
            return all_operations(kind)
        return self._current().operations(principal(), client_ip(), kind, name)


    def cluster_operations(self) -> int:
        """The cluster's bit field: 0 without DESCRIBE on it (Kafka's rule)."""
        if not self.allowed(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME, quiet=True):
            return 0
        return self.operations(CLUSTER, CLUSTER_NAME)


def file_refresh(store, changes) -> Callable[[Authorizer], None]:
    """Standalone: the ACL file read again once any worker's change counter moved.
    ACLs that cannot be read deny everyone but the super users until they can."""
    def refresh(authorizer: Authorizer) -> None:
        stamp = changes.stamp()
        if stamp == authorizer.version:
            return
        try:
            authorizer.load(store.read(), stamp)
        except AclStoreError as exc:
            _problems.log(logging.ERROR, "unreadable", "%s: denying everyone but the super users until the ACLs "
                                                       "can be read", exc)
            authorizer.fail_closed()  # read again at the next decision
    return refresh
