"""A worker's admin writes to ZooKeeper, as coroutines on its event loop:
CreateTopics, CreatePartitions, AlterConfigs, DeleteTopics, producer id
blocks, reassignments, election requests and users' SCRAM credentials, in
Kafka's layout (any broker makes them; the controller and the watches do the
rest).

Nothing here blocks the loop: every ZooKeeper call goes through kazoo's
asynchronous operations (``cluster/zk_ops.py``, on the acceptor's session
in a broker), and each operation as a whole is
bounded by ``timeout_s``.  While ZooKeeper cannot be reached kazoo queues the
request; when the time is up the caller gets ``AdminError("unavailable")``
and the loop has served everything else meanwhile.  (A queued request may
still reach ZooKeeper later, as with any client whose answer was lost: the
client sees a timeout and, retrying, finds the change made.)

Every read-modify-write goes through one compare-and-set,
``ClusterAdmin.compare_and_set``: read the znode and its version, decide (the
new content, or nothing to write), write only if the version is still the
one read (in one transaction with further version-checked writes, if any),
and after a lost race (BadVersion, NoNode, NodeExists) read again, at most
``CAS_ATTEMPTS`` times, with a jittered pause between tries so that brokers
racing for the same znode spread out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from hpbroker.cluster import reassignment, znodes

log = logging.getLogger(__name__)
T = TypeVar("T")

ADMIN_TIMEOUT_S = 10.0  # one admin operation, every try of it included
CAS_ATTEMPTS = 20
BACKOFF_FIRST_S = 0.01  # the pause after the first lost race, at most; doubling per try
BACKOFF_MAX_S = 0.5
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's


class AdminError(Exception):
    """An admin write ZooKeeper refused or could not take; ``reason`` names the case."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason  # "exists", "missing", "unavailable", "conflict"


@dataclasses.dataclass(frozen=True)
class Checked:
    """One more write in a compare-and-set's transaction: ``path`` set to
    ``data`` (deleted when None) if it is still at ``version``."""
    path: str
    data: bytes | None
    version: int


@dataclasses.dataclass(frozen=True)
class Write:
    """A compare-and-set's decision to write: the znode's new content (None:
    delete it), what ``compare_and_set`` returns once it is written, further
    checked writes and sequential znodes to create (parent path prefix, data)
    for the same transaction."""
    data: bytes | None
    result: object = None
    also: tuple[Checked, ...] = ()
    notes: tuple[tuple[str, bytes], ...] = ()


# decide(current content, None when the znode does not exist) -> Write, or the answer with nothing to write
Decide = Callable[[bytes | None], Awaitable[object]]


class ClusterAdmin:
    def __init__(self, link, timeout_s: float = ADMIN_TIMEOUT_S):
        self.link = link  # its ``zk`` operations and its ``image``
        self.timeout_s = timeout_s

    # --- the one compare-and-set ------------------------------------------------------------------
    async def compare_and_set(self, path: str, decide: Decide, what: str) -> Any:
        """Change ``path`` from what it holds now: ``await decide(data)`` (data
        None when the znode does not exist) returns a ``Write`` to create or
        set it (its ``result`` is then returned), or anything else to leave it
        as it is (that is then returned).  A write that lost a race decides
        again from what is there; AdminError("conflict") after CAS_ATTEMPTS."""
        return await self._bounded(what, self._compare_and_set(path, decide, what))

    async def _compare_and_set(self, path: str, decide: Decide, what: str) -> Any:
        for attempt in range(CAS_ATTEMPTS):
            if attempt:
                await asyncio.sleep(random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (attempt - 1))))
            data, stat = await self._read(path)
            decision = await decide(data)
            if not isinstance(decision, Write):
                return decision
            ops: list[tuple] = []
            if decision.data is None:
                if stat is None:
                    return decision.result  # nothing there to delete
                ops.append(("delete", path, stat.version))
            elif stat is None:
                await self._ensure_parent(path)
                ops.append(("create", path, decision.data))
            else:
                ops.append(("set", path, decision.data, stat.version))
            for extra in decision.also:
                if extra.data is None:
                    ops.append(("delete", extra.path, extra.version))
                else:
                    ops.append(("set", extra.path, extra.data, extra.version))
            ops.extend(("create_sequential", prefix, data) for prefix, data in decision.notes)
            try:
                await self._commit(ops, what)
            except AdminError as exc:
                if exc.reason == "unavailable":
                    raise
                continue  # changed, created or removed meanwhile: again from what is there
            return decision.result
        raise AdminError("conflict", f"{what} kept changing: not written after {CAS_ATTEMPTS} tries")

    # --- topics ---------------------------------------------------------------------------------------
    async def create_topic(self, assignment: znodes.TopicAssignment, config: dict[str, str]) -> None:
        """Kafka's order: the config first, then the assignment that makes the
        topic exist, in one transaction (AdminError("exists") when it does)."""
        what = f"topic {assignment.topic!r}"
        await self._bounded(what, self._commit([
            ("create", znodes.topic_config_path(assignment.topic), znodes.encode_topic_config(config)),
            ("create", znodes.topic_path(assignment.topic), assignment.encode())], what))

    async def update_topic(self, topic: str,
                           change: Callable[[znodes.TopicAssignment], znodes.TopicAssignment]) -> None:
        """Write ``change(assignment)`` over the topic's assignment as ZooKeeper
        holds it now (AdminError("missing") when the topic is not there)."""
        async def decide(data):
            if data is None:
                raise AdminError("missing", f"topic {topic!r} does not exist")
            return Write(change(self._decoded(topic, data)).encode())
        await self.compare_and_set(znodes.topic_path(topic), decide, f"topic {topic!r}")

    async def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        """Replace the topic's overrides (``/config/topics/<topic>``)."""
        encoded = znodes.encode_topic_config(config)

        async def decide(_data):
            return Write(encoded)
        await self.compare_and_set(znodes.topic_config_path(topic), decide, f"the config of topic {topic!r}")

    async def delete_topic(self, topic: str) -> None:
        """Ask the controller to delete it (``/admin/delete_topics/<topic>``)."""
        async def ask() -> None:
            try:
                await self._zk(self._ops().create(f"{znodes.DELETE_TOPICS}/{topic}", makepath=True))
            except NodeExistsError:
                pass  # already asked
        await self._bounded(f"deleting topic {topic!r}", ask())

    # --- producer ids ---------------------------------------------------------------------------------
    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        """A block [start, end] of producer ids no other broker will hand out:
        ``/latest_producer_id_block`` advanced as Kafka does."""
        async def decide(data):
            start = 0
            if data:
                try:
                    start = int(json.loads(data)["block_end"]) + 1
                except (ValueError, KeyError, TypeError):
                    raise AdminError("conflict", f"{znodes.PRODUCER_ID_BLOCK} is not Kafka's JSON") from None
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            return Write(json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                                     "block_end": str(end)}).encode(), (start, end))
        return await self.compare_and_set(znodes.PRODUCER_ID_BLOCK, decide, znodes.PRODUCER_ID_BLOCK)

    # --- users (SCRAM credentials) ----------------------------------------------------------------------
    async def user_config(self, user: str) -> dict[str, str]:
        """The user's settings (``/config/users/<user>``); empty when none."""
        data, _stat = await self._bounded(f"the config of user {user!r}", self._read(znodes.user_config_path(user)))
        return znodes.decode_user_config(user, data)

    async def user_configs(self) -> dict[str, dict[str, str]]:
        """Every user's settings."""
        async def read() -> tuple[list[str], list]:
            try:
                names = sorted(await self._zk(self._ops().children(znodes.USER_CONFIGS)))
            except NoNodeError:
                return [], []
            users = [znodes.user_of_znode(name) for name in names]
            return users, await asyncio.gather(*(self._read(znodes.user_config_path(u)) for u in users))
        users, reads = await self._bounded("listing users", read())
        found = {}
        for user, (data, _stat) in zip(users, reads):
            try:
                found[user] = znodes.decode_user_config(user, data)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring user %s: %s", user, exc)
        return found

    async def change_user_config(self, user: str, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """Write ``change(settings)`` over the user's settings as ZooKeeper holds them now."""
        async def decide(data):
            return Write(znodes.encode_user_config(change(znodes.decode_user_config(user, data))))
        await self.compare_and_set(znodes.user_config_path(user), decide, f"the config of user {user!r}")

    # --- ACLs -------------------------------------------------------------------------------------------
    async def change_acls(self, type_name: str, enum_name: str, name: str, prefixed: bool,
                          change: Callable[[bytes | None], bytes | None]) -> None:
        """Write ``change(what the resource's znode holds)`` over it (None:
        delete it, as Kafka does once a resource has no ACL left), with the
        change notification Kafka's authorizers watch, in one transaction.
        The resource type is named both ways Kafka names it: ``TransactionalId``
        in the path, ``TRANSACTIONAL_ID`` in the notification."""
        path = znodes.acl_path(type_name, name, prefixed)
        parent, note = znodes.acl_change(enum_name, name, prefixed)

        async def decide(data):
            new = change(data)
            if new == data:
                return None
            return Write(new, notes=((f"{parent}/{znodes.ACL_CHANGE_PREFIX}", note),))
        await self.compare_and_set(path, decide, f"the ACLs of {path}")
        try:
            await self._bounded(f"purging {parent}", self._purge_notes(parent))
        except (AdminError, NoNodeError, NodeExistsError, BadVersionError) as exc:
            log.debug("old ACL change notifications under %s not purged: %s", parent, exc)

    async def _purge_notes(self, parent: str) -> None:
        """Only the newest change notifications are kept (nobody here reads
        them: the brokers watch the ACLs' znodes themselves)."""
        names = sorted(n for n in await self._zk(self._ops().children(parent))
                       if n.startswith(znodes.ACL_CHANGE_PREFIX))
        stale = names[:-znodes.ACL_CHANGES_KEPT]
        if stale:
            await self._zk(self._ops().multi([("delete", f"{parent}/{n}", -1) for n in stale]))

    # --- reassignments and elections ------------------------------------------------------------------
    async def alter_reassignments(self, topic: str, changes: dict[int, list[int] | None], *,
                                  allow_replication_factor_change: bool = True) -> dict[int, reassignment.Outcome]:
        """Start, redirect or cancel (None) reassignments of ``topic``'s
        partitions, checked against what ZooKeeper holds now and written as the
        topic znode's next version; the controller carries them out.  An
        accepted partition also leaves ``/admin/reassign_partitions``: in Kafka
        the latest request wins."""
        async def decide(data):
            current = None
            if data is not None and not await self._zk(self._ops().exists(f"{znodes.DELETE_TOPICS}/{topic}")):
                current = self._decoded(topic, data)  # (a topic being deleted is as good as gone)
            image = self.link.image()
            planned, outcomes = reassignment.plan(topic, current, changes, image.live - image.shutting_down,
                                                  allow_replication_factor_change=allow_replication_factor_change)
            if planned is None:
                return outcomes
            accepted = {p for p, outcome in outcomes.items() if outcome.error == reassignment.ACCEPTED.error}
            return Write(planned.encode(), outcomes, await self._legacy_without(topic, accepted))
        return await self.compare_and_set(znodes.topic_path(topic), decide, f"topic {topic!r}")

    async def _legacy_without(self, topic: str, partitions: set[int]) -> tuple[Checked, ...]:
        """The write taking these partitions of ``topic`` out of ``/admin/reassign_partitions``, if any."""
        data, stat = await self._read(znodes.REASSIGN_PARTITIONS)
        try:
            entries = znodes.decode_reassignment(data) if data else []
        except znodes.ZnodeFormatError:
            return ()
        keep = [e for e in entries if not (e[0] == topic and e[1] in partitions)]
        if len(keep) == len(entries):
            return ()
        assert stat is not None  # it held entries: it exists
        return (Checked(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(keep) if keep else None, stat.version),)

    async def list_reassignments(self, wanted: dict[str, list[int]] | None) -> list[reassignment.OngoingReassignment]:
        """The reassignments under way, read from ZooKeeper now (so a client sees
        its own AlterPartitionReassignments at once): of ``wanted`` topic ->
        partitions, or of every topic when None."""
        async def read() -> tuple[list[str], list]:
            if wanted is None:
                topics = sorted(await self._zk(self._ops().children(znodes.TOPICS)))
            else:
                topics = sorted(wanted)
            return topics, await asyncio.gather(*(self._read(znodes.topic_path(topic)) for topic in topics))
        topics, reads = await self._bounded("listing reassignments", read())
        found = []
        for topic, (data, _stat) in zip(topics, reads):
            if data is None:
                continue
            try:
                assignment = znodes.TopicAssignment.decode(topic, data)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring topic %s: %s", topic, exc)
                continue
            found += reassignment.ongoing(assignment, None if wanted is None else set(wanted[topic]))
        return found

    async def request_preferred_election(self, partitions: list[tuple[str, int]]) -> None:
        """Ask the controller for preferred leaders (Kafka's ``/admin/preferred_replica_election``)."""
        await self._request(znodes.PREFERRED_REPLICA_ELECTION, partitions, znodes.decode_preferred_election,
                            znodes.encode_preferred_election)

    async def request_unclean_election(self, partitions: list[tuple[str, int]]) -> None:
        """Ask the controller to elect leaders of these offline partitions from outside their ISR."""
        await self._request(znodes.UNCLEAN_LEADER_ELECTION, partitions, znodes.decode_unclean_election,
                            znodes.encode_unclean_election)

    async def _request(self, path: str, partitions: list[tuple[str, int]], decode, encode) -> None:
        """Add ``partitions`` to the request znode ``path``, or create it; a
        request the controller has not taken yet is kept."""
        async def decide(data):
            try:
                pending = decode(data) if data else []
            except znodes.ZnodeFormatError:
                pending = []  # unreadable to the controller too: replaced
            return Write(encode(sorted(set(pending) | set(partitions))))
        await self.compare_and_set(path, decide, path)

    # --- ZooKeeper calls ------------------------------------------------------------------------------
    def _ops(self):
        return self.link.zk

    async def _bounded(self, what: str, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result within ``timeout_s`` (AdminError("unavailable") then).
        ``wait_for`` runs it in a task of its own, which the time limit cancels:
        ``asyncio.timeout`` would need the caller to be a task, and a request
        is handled without one when it arrives (``workers/eager.py``)."""
        try:
            return await asyncio.wait_for(work, self.timeout_s)
        except TimeoutError:
            raise AdminError("unavailable", f"{what}: ZooKeeper did not answer within {self.timeout_s:g} s") from None

    async def _zk(self, operation):
        """A ZooKeeper operation's result; the node errors pass through, any
        other failure of ZooKeeper is AdminError("unavailable")."""
        try:
            return await operation
        except (NodeExistsError, NoNodeError, BadVersionError):
            raise
        except KazooException as exc:
            raise AdminError("unavailable", f"ZooKeeper did not take the change: {exc!r}") from None

    async def _read(self, path: str):
        """(data, stat), or (None, None) when the znode does not exist."""
        try:
            return await self._zk(self._ops().get(path))
        except NoNodeError:
            return None, None

    async def _ensure_parent(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent:
            await self._zk(self._ops().ensure_path(parent))

    async def _commit(self, ops: list[tuple], what: str) -> None:
        # a failed transaction fails every operation: the one that failed carries its own error
        results = await self._zk(self._ops().multi(ops))
        if any(isinstance(r, NodeExistsError) for r in results):
            raise AdminError("exists", f"{what} already exists")
        if any(isinstance(r, (NoNodeError, BadVersionError)) for r in results):
            raise AdminError("missing", f"{what} changed or vanished meanwhile")
        if any(isinstance(r, Exception) for r in results):
            raise AdminError("unavailable", f"{what}: {results!r}")

    @staticmethod
    def _decoded(topic: str, data: bytes) -> znodes.TopicAssignment:
        try:
            return znodes.TopicAssignment.decode(topic, data)
        except znodes.ZnodeFormatError as exc:
            raise AdminError("conflict", str(exc)) from None
