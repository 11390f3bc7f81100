"""Where ACLs live, and the changes CreateAcls and DeleteAcls make to them.

Standalone they are one JSON file at the root of the first log dir
(``hpbroker-acls.json``, each resource pattern with its entries in
ZooKeeper's form), rewritten whole under a lock by whichever worker takes
the request; the worker then bumps its slot of the shared change counters,
and every worker reads the file again before its next decision.  In a
cluster they are ZooKeeper's, in Kafka's layout (``workers/zookeeper_acls.py``).

Both stores take the same two changes: ``add`` (bindings to add) and
``remove`` (filters whose matches to remove), each deciding from what is
stored now, so two brokers (or workers) changing ACLs at once lose neither's.
"""

from __future__ import annotations

import asyncio

from hpbroker.security import locked_json
from hpbroker.security.acls import (
    RESOURCE_NAMES,
    AclError,
    Binding,
    Entry,
    Filter,
    PatternType,
    Resource,
    entries_of,
    resource_type_named,
)

ACLS_FILE = "hpbroker-acls.json"

Acls = dict[Resource, frozenset[Entry]]


class AclStoreError(Exception):
    """The ACLs cannot be read or written now (ZooKeeper away, the disk refusing);
    ``retriable`` when trying again later may succeed (ZooKeeper did not answer)."""

    def __init__(self, message: str, retriable: bool = False):
        super().__init__(message)
        self.retriable = retriable


def added(acls: Acls, bindings: list[Binding]) -> Acls:
    result = dict(acls)
    for binding in bindings:
        result[binding.resource] = result.get(binding.resource, frozenset()) | {binding.entry}
    return result


def removed(acls: Acls, filters: list[Filter]) -> tuple[Acls, list[list[Binding]]]:
    """What is left once every filter's matches are gone, and each filter's matches."""
    matched: list[list[Binding]] = [[] for _ in filters]
    result: Acls = {}
    for resource, entries in acls.items():
        kept = set()
        for entry in entries:
            binding = Binding(resource, entry)
            hits = [i for i, f in enumerate(filters) if f.matches(binding)]
            for i in hits:
                matched[i].append(binding)
            if not hits:
                kept.add(entry)
        if kept:
            result[resource] = frozenset(kept)
    return result, matched


# --- the standalone file ------------------------------------------------------------------------
def encode_file(acls: Acls) -> dict:
    return {"version": 1, "acls": [
        {"resourceType": RESOURCE_NAMES[r.kind], "patternType": r.pattern.name, "name": r.name,
         "acls": [e.encode() for e in sorted(entries)]}
        for r, entries in sorted(acls.items())]}


def decode_file(document: dict) -> Acls:
    acls: Acls = {}
    for item in document.get("acls", []):
        try:
            resource = Resource(resource_type_named(item["resourceType"]), str(item["name"]),
                                PatternType[item.get("patternType", "LITERAL")])
        except (KeyError, TypeError) as exc:
            raise AclError(f"a resource without {exc}") from None
        acls[resource] = acls.get(resource, frozenset()) | entries_of(item.get("acls", []))
    return acls


class FileAcls:
    def __init__(self, path: str, changes=None):
        self.path = path
        self.changes = changes  # shared.counters.TopicChanges-like: bumped after every rewrite

    def read(self) -> Acls:
        """What the file holds now (blocking: a small file, read when it changed)."""
        try:
            return decode_file(locked_json.read(self.path))
        except (OSError, ValueError) as exc:
            raise AclStoreError(f"cannot read {self.path}: {exc}") from None

    async def add(self, bindings: list[Binding]) -> None:
        await self._rewrite(lambda acls: (added(acls, bindings), None))

    async def remove(self, filters: list[Filter]) -> list[list[Binding]]:
        return await self._rewrite(lambda acls: removed(acls, filters))

    async def _rewrite(self, change):
        outcome = []

        def rewrite(document: dict) -> dict:
            acls, result = change(decode_file(document))
            outcome.append(result)
            return encode_file(acls)
        try:
            await asyncio.to_thread(locked_json.rewrite, self.path, rewrite)
        except (OSError, ValueError) as exc:
            raise AclStoreError(f"cannot write {self.path}: {exc}") from None
        if self.changes is not None:
            self.changes.bump()
        return outcome[0]

