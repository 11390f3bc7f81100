"""A worker's own ZooKeeper session: the cluster image, the leader's ISR
writes, admin writes and producer id blocks.

Each worker opens its session after it was forked (never sharing the
acceptor's, whose threads do not survive a fork) and learns its partitions'
roles from the image directly: nothing has to relay it, and a worker that is
cut off from ZooKeeper knows so itself.

Watches fire on kazoo's threads; one publisher thread hands each new image
(and each change of the session, ``Session``) to the worker's event loop, in
order.  A lost connection is only SUSPENDED: the session lives on in
ZooKeeper until its timeout, and ZooKeeper itself keeps it through a restart,
so leaders go on serving (as Kafka's do); only an EXPIRED session, which
ZooKeeper tells on reconnecting, ends what this broker held.  After a
reconnect the partition states are read again before the session is called
CONNECTED, so a leader resumes only on a fresh view.

Writes from the event loop never block it: ``call`` wraps kazoo's
asynchronous API in an asyncio future; admin writes, rare and small, may use
``wait`` with a bound instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import threading

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from hpbroker.cluster import reassignment, session, znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.watcher import ImageWatcher

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 10.0
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's


def _settle(future: asyncio.Future, value, error: Exception | None) -> None:
    if not future.done():
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


class Session(enum.Enum):
    CONNECTED = "connected"  # connected, and the states read since the last reconnect
    SUSPENDED = "suspended"  # the connection is down; the session may well live on
    EXPIRED = "expired"  # ZooKeeper ended it: nothing held under it can be trusted until read again


class AdminError(Exception):
    """An admin write ZooKeeper refused or could not take; ``reason`` names the case."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason  # "exists", "missing", "unavailable", "conflict"


class WorkerLink:
    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int, cluster_id: str):
        self.connect_string = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.cluster_id = cluster_id
        self.client = None
        self.watcher: ImageWatcher | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._session = Session.CONNECTED  # as kazoo last said (CONNECTED only once the states were read)
        self._reconnected = False

    # --- session -------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the session and start watching (``session.ZooKeeperUnavailable``
        when no server answers in time)."""
        self.client = session.connect(self.connect_string, self.session_timeout_ms, self.connection_timeout_ms)
        self.watcher = ImageWatcher(self.client, self.cluster_id)
        self.watcher.start()
        self.client.add_listener(self._on_state)

    def publish_to(self, on_image, on_session) -> None:
        """Hand ``on_image(image)`` and ``on_session(Session)`` every change, from
        one thread: the callbacks pass them on to their own loop."""
        self._thread = threading.Thread(target=self._publish, args=(on_image, on_session), name="cluster-image",
                                        daemon=True)
        self._thread.start()

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: only note it and wake the publisher
        if state == KazooState.CONNECTED:
            self._reconnected = True
        elif state == KazooState.LOST:
            self._session = Session.EXPIRED
        elif self._session is Session.CONNECTED:
            self._session = Session.SUSPENDED
        self.watcher.poke()

    def _publish(self, on_image, on_session) -> None:
        generation, published = -1, Session.CONNECTED
        while not self._stopped.is_set():
            changed = self.watcher.wait_changed(generation, timeout=1.0)
            if self._stopped.is_set():
                return
            if self._reconnected:
                self._reconnected = False
                try:
                    self.watcher.reread_states()
                    self._session = Session.CONNECTED
                except KazooException as exc:
                    log.warning("re-reading partition states after a reconnect failed: %r", exc)
                    self._reconnected = True
                    self._stopped.wait(0.2)
                    continue
            session = self._session
            if session is not published:
                published = session
                log.warning("ZooKeeper session %s", {
                    Session.CONNECTED: "connected again, partition states read",
                    Session.SUSPENDED: "suspended (connection lost): leaders keep serving while it may live",
                    Session.EXPIRED: "expired: leaderships in doubt until a new session has read the states",
                }[session])
                on_session(session)
            if changed != generation:
                generation = changed
                on_image(self.watcher.image())

    def image(self) -> ClusterImage:
        return self.watcher.image()

    def close(self) -> None:
        self._stopped.set()
        if self.watcher is not None:
            self.watcher.stop()
        if self.client is not None:
            session.close(self.client)
            self.client = None

    # --- the leader's writes -----------------------------------------------------------------
    async def propose_isr(self, topic: str, partition: int,
                          state: znodes.PartitionState) -> znodes.PartitionState | None:
        """Set the partition's state if nobody changed it since ``state.zk_version``;
        the state as written (its new version and zxid), or None when it had
        changed (the controller or a newer leader won: the image will show what
        is true)."""
        try:
            stat = await self.call(self.client.set_async(znodes.partition_state_path(topic, partition),
                                                         state.encode(), version=state.zk_version))
        except (BadVersionError, NoNodeError):
            return None
        return dataclasses.replace(state, zk_version=stat.version, zxid=stat.mzxid)

    @staticmethod
    def call(async_result) -> asyncio.Future:
        """An asyncio future of a kazoo asynchronous call (its result or exception)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(result) -> None:
            try:
                value = result.get_nowait()
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine as is
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, value, None)
        async_result.rawlink(settle)
        return future

    # --- admin writes (bounded waits) --------------------------------------------------------------
    def create_topic(self, assignment: znodes.TopicAssignment, config: dict[str, str]) -> None:
        """Kafka's order: the config first, then the assignment that makes the topic exist."""
        transaction = self.client.transaction()
        transaction.create(znodes.topic_config_path(assignment.topic), znodes.encode_topic_config(config))
        transaction.create(znodes.topic_path(assignment.topic), assignment.encode())
        self._commit(transaction, f"topic {assignment.topic!r}")

    def add_partitions(self, assignment: znodes.TopicAssignment, version: int) -> None:
        transaction = self.client.transaction()
        transaction.set_data(znodes.topic_path(assignment.topic), assignment.encode(), version=version)
        self._commit(transaction, f"topic {assignment.topic!r}")

    def topic_version(self, topic: str) -> int:
        _data, stat = self.wait(self.client.get_async(znodes.topic_path(topic)))
        return stat.version

    def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        path = znodes.topic_config_path(topic)
        try:
            self.wait(self.client.set_async(path, znodes.encode_topic_config(config)))
        except NoNodeError:
            self.wait(self.client.create_async(path, znodes.encode_topic_config(config), makepath=True))

    def delete_topic(self, topic: str) -> None:
        """Ask the controller to delete it (``/admin/delete_topics/<topic>``)."""
        try:
            self.wait(self.client.create_async(f"{znodes.DELETE_TOPICS}/{topic}", makepath=True))
        except NodeExistsError:
            pass  # already asked

    def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        """A block [start, end] of producer ids no other broker will hand out:
        ``/latest_producer_id_block`` advanced with a version-checked set, as Kafka does."""
        for _attempt in range(20):
            try:
                data, stat = self.wait(self.client.get_async(znodes.PRODUCER_ID_BLOCK))
            except NoNodeError:
                self.client.ensure_path(znodes.PRODUCER_ID_BLOCK)
                continue
            start = 0
            if data:
                try:
                    start = int(json.loads(data)["block_end"]) + 1
                except (ValueError, KeyError, TypeError):
                    raise AdminError("conflict", f"{znodes.PRODUCER_ID_BLOCK} is not Kafka's JSON") from None
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            value = json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                                "block_end": str(end)}).encode()
            try:
                self.wait(self.client.set_async(znodes.PRODUCER_ID_BLOCK, value, version=stat.version))
            except BadVersionError:
                continue  # another broker took one meanwhile
            return start, end
        raise AdminError("conflict", "could not reserve a producer id block: too much contention")

    def _commit(self, transaction, what: str) -> None:
        # a failed transaction fails every operation: the one that failed carries its own error
        results = self.wait(transaction.commit_async())
        if any(isinstance(r, NodeExistsError) for r in results):
            raise AdminError("exists", f"{what} already exists")
        if any(isinstance(r, (NoNodeError, BadVersionError)) for r in results):
            raise AdminError("missing", f"{what} changed or vanished meanwhile")
        if any(isinstance(r, Exception) for r in results):
            raise AdminError("unavailable", f"{what}: {results!r}")

    @staticmethod
    def wait(async_result, timeout: float = WRITE_TIMEOUT_S):
        """Block for a kazoo call's result at most ``timeout``; AdminError("unavailable")
        when ZooKeeper fails or does not answer (the node errors pass through)."""
        try:
            return async_result.get(timeout=timeout)
        except (NodeExistsError, NoNodeError, BadVersionError):
            raise
        except KazooException as exc:
            raise AdminError("unavailable", f"ZooKeeper did not take the change: {exc!r}") from None
        except KazooTimeoutError:
            raise AdminError("unavailable", f"ZooKeeper did not answer within {timeout:.0f} s") from None

    # --- reassignments and leader elections (blocking, bounded: run them off the event loop) -------
    def alter_reassignments(self, topic: str, changes: dict[int, list[int] | None], *,
                            allow_replication_factor_change: bool = True) -> dict[int, reassignment.Outcome]:
        """Start, redirect or cancel (None) reassignments of ``topic``'s
        partitions, checked against what ZooKeeper holds now and written as the
        topic znode's next version; the controller carries them out.  An
        accepted partition also leaves ``/admin/reassign_partitions``: in Kafka
        the latest request wins."""
        for _attempt in range(20):
            try:
                data, stat = self.wait(self.client.get_async(znodes.topic_path(topic)))
                current = znodes.TopicAssignment.decode(topic, data)
            except NoNodeError:
                current, stat = None, None
            except znodes.ZnodeFormatError as exc:
                raise AdminError("conflict", str(exc)) from None
            if current is not None and self.wait(self.client.exists_async(f"{znodes.DELETE_TOPICS}/{topic}")):
                current = None  # being deleted: as good as gone
            image = self.watcher.image()
            planned, outcomes = reassignment.plan(topic, current, changes, image.live - image.shutting_down,
                                                  allow_replication_factor_change=allow_replication_factor_change)
            if planned is None:
                return outcomes
            transaction = self.client.transaction()
            transaction.set_data(znodes.topic_path(topic), planned.encode(), version=stat.version)
            accepted = {p for p, outcome in outcomes.items() if outcome.error == reassignment.ACCEPTED.error}
            self._drop_legacy_entries(transaction, topic, accepted)
            try:
                self._commit(transaction, f"topic {topic!r}")
            except AdminError as exc:
                if exc.reason == "missing":
                    continue  # the topic or /admin/reassign_partitions changed meanwhile: again from what is there
                raise
            return outcomes
        raise AdminError("conflict", f"topic {topic!r} kept changing: the reassignment was not written")

    def _drop_legacy_entries(self, transaction, topic: str, partitions: set[int]) -> None:
        try:
            data, stat = self.wait(self.client.get_async(znodes.REASSIGN_PARTITIONS))
            entries = znodes.decode_reassignment(data) if data else []
        except (NoNodeError, znodes.ZnodeFormatError):
            return
        keep = [e for e in entries if not (e[0] == topic and e[1] in partitions)]
        if len(keep) == len(entries):
            return
        if keep:
            transaction.set_data(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(keep), version=stat.version)
        else:
            transaction.delete(znodes.REASSIGN_PARTITIONS, version=stat.version)

    def list_reassignments(self, wanted: dict[str, list[int]] | None) -> list[reassignment.OngoingReassignment]:
        """The reassignments under way, read from ZooKeeper now (so a client sees
        its own AlterPartitionReassignments at once): of ``wanted`` topic ->
        partitions, or of every topic when None."""
        if wanted is None:
            topics = sorted(self.wait(self.client.get_children_async(znodes.TOPICS)))
        else:
            topics = sorted(wanted)
        reads = [(topic, self.client.get_async(znodes.topic_path(topic))) for topic in topics]  # all in flight at once
        found = []
        for topic, read in reads:
            try:
                data, _stat = self.wait(read)
                assignment = znodes.TopicAssignment.decode(topic, data)
            except NoNodeError:
                continue
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring topic %s: %s", topic, exc)
                continue
            found += reassignment.ongoing(assignment, None if wanted is None else set(wanted[topic]))
        return found

    def request_preferred_election(self, partitions: list[tuple[str, int]]) -> None:
        """Ask the controller for preferred leaders (Kafka's ``/admin/preferred_replica_election``)."""
        self._request(znodes.PREFERRED_REPLICA_ELECTION, partitions, znodes.decode_preferred_election,
                      znodes.encode_preferred_election)

    def request_unclean_election(self, partitions: list[tuple[str, int]]) -> None:
        """Ask the controller to elect leaders of these offline partitions from outside their ISR."""
        self._request(znodes.UNCLEAN_LEADER_ELECTION, partitions, znodes.decode_unclean_election,
                      znodes.encode_unclean_election)

    def _request(self, path: str, partitions: list[tuple[str, int]], decode, encode) -> None:
        """Add ``partitions`` to the request znode ``path``, or create it; a
        request the controller has not taken yet is kept."""
        for _attempt in range(20):
            try:
                data, stat = self.wait(self.client.get_async(path))
            except NoNodeError:
                try:
                    self.wait(self.client.create_async(path, encode(partitions), makepath=True))
                    return
                except NodeExistsError:
                    continue
            try:
                pending = decode(data) if data else []
            except znodes.ZnodeFormatError:
                pending = []  # unreadable to the controller too: replaced
            try:
                self.wait(self.client.set_async(path, encode(sorted(set(pending) | set(partitions))),
                                                version=stat.version))
                return
            except (BadVersionError, NoNodeError):
                continue  # taken or changed meanwhile
        raise AdminError("conflict", f"could not write {path}: too much contention")
