"""ACLs in a cluster: ZooKeeper's, in Kafka's AclAuthorizer layout
(``/kafka-acl/<ResourceType>/<name>``, prefixed patterns under
``/kafka-acl-extended/prefixed``, one znode per resource pattern holding its
entries as ``{"version": 1, "acls": [...]}``), so ``zkCli.sh`` shows what an
operator of Kafka expects, and ACLs Kafka's own tools wrote there are read.

Every broker watches those znodes (``cluster/watcher.py``) and its workers
get them with the cluster image; a change is written through the worker's
admin client on the broker's one ZooKeeper session, one compare-and-set per
resource pattern (with Kafka's change notification).  The request that made
it is answered once this worker's own image shows it, so the client's next
request here is decided by it; other brokers follow within a watch's delay,
as Kafka's do.
"""

from __future__ import annotations

import asyncio
import logging

from hpbroker.cluster.admin import AdminError
from hpbroker.security.acl_store import Acls, AclStoreError, added, removed
from hpbroker.security.acls import (
    RESOURCE_NAMES,
    AclError,
    Binding,
    Entry,
    Filter,
    PatternType,
    Resource,
    decode_entries,
    encode_entries,
)

log = logging.getLogger(__name__)
SEEN_TIMEOUT_S = 5.0  # how long an answer waits for the broker's own watch to show its change


class ZooKeeperAcls:
    def __init__(self, admin, image):
        self.admin = admin  # cluster.admin.ClusterAdmin
        self.image = image  # () -> the worker's current cluster image
        self._changed = asyncio.Event()  # set (and replaced) at each new image

    def read(self) -> Acls:
        return self.image().acls

    def image_changed(self) -> None:
        """The worker took a new image: wake the answers waiting to see their change."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def add(self, bindings: list[Binding]) -> None:
        by_resource = added({}, bindings)
        for resource, entries in by_resource.items():
            await self._change(resource, lambda current, entries=entries: current | entries)
        await self._until(lambda acls: all(entries <= acls.get(r, frozenset()) for r, entries in by_resource.items()))

    async def remove(self, filters: list[Filter]) -> list[list[Binding]]:
        """Each filter's matches among the ACLs this broker knows, removed from what ZooKeeper holds."""
        matched: list[list[Binding]] = [[] for _ in filters]
        _, known = removed(self.read(), filters)
        for resource in sorted({b.resource for hits in known for b in hits}):
            last: list[list[list[Binding]]] = []  # this resource's matches in the last read (a retry reads again)

            def drop(current: frozenset[Entry], resource=resource) -> frozenset[Entry]:
                left, hits = removed({resource: current}, filters)
                last[:] = [hits]
                return left.get(resource, frozenset())
            await self._change(resource, drop)
            for i, hits in enumerate(last[0] if last else ()):
                matched[i].extend(hits)
        gone = {b for hits in matched for b in hits}
        await self._until(lambda acls: not any(b.entry in acls.get(b.resource, frozenset()) for b in gone))
        return [sorted(set(hits)) for hits in matched]

    async def _change(self, resource: Resource, change) -> None:
        if "/" in resource.name:
            raise AclStoreError(f"resource name {resource.name!r} has a '/', which a ZooKeeper path cannot hold")

        def rewrite(data: bytes | None) -> bytes | None:
            try:
                current = decode_entries(data)
            except AclError as exc:
                raise AclStoreError(f"the ACLs of {resource} in ZooKeeper are unreadable: {exc}") from None
            new = change(current)
            if new == current:
                return data
            return encode_entries(new) if new else None
        try:
            await self.admin.change_acls(RESOURCE_NAMES[resource.kind], resource.kind.name, resource.name,
                                         resource.pattern is PatternType.PREFIXED, rewrite)
        except AdminError as exc:
            raise AclStoreError(str(exc), retriable=exc.reason == "unavailable") from None

    async def _until(self, shown) -> None:
        async def wait() -> None:
            while not shown(self.read()):
                await self._changed.wait()
        try:
            await asyncio.wait_for(wait(), SEEN_TIMEOUT_S)
        except TimeoutError:
            log.warning("an ACL change was written but this broker's watch has not shown it after %g s",
                        SEEN_TIMEOUT_S)
