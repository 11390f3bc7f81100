"""A worker's own ZooKeeper session: the cluster image, the leader's ISR
writes, and the admin writes (``cluster/admin.py``, as ``WorkerLink.admin``).

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
asynchronous API in an asyncio future, for the ISR writes here and for every
admin write (``ClusterAdmin``, bounded by its timeout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import threading

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from hpbroker.cluster import session, znodes
from hpbroker.cluster.admin import ClusterAdmin
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.watcher import ImageWatcher

log = logging.getLogger(__name__)


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
        self.admin = ClusterAdmin(self)  # the admin writes, coroutines over this session

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
        assert self.watcher is not None  # listening only once connect() made it
        self.watcher.poke()

    def _publish(self, on_image, on_session) -> None:
        watcher = self.watcher
        assert watcher is not None, "not connected"
        generation, published = -1, Session.CONNECTED
        while not self._stopped.is_set():
            changed = watcher.wait_changed(generation, timeout=1.0)
            if self._stopped.is_set():
                return
            if self._reconnected:
                self._reconnected = False
                try:
                    watcher.reread_states()
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
                on_image(watcher.image())

    def image(self) -> ClusterImage:
        assert self.watcher is not None, "not connected"
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
        assert self.client is not None, "not connected"
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
