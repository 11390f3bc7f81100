"""What a session's holder tells of it: the cluster image as it changes, and
the session's state, from one thread, in order.

A lost connection is only SUSPENDED: the session lives on in ZooKeeper until
its timeout, and ZooKeeper itself keeps it through a restart, so leaders go
on serving (as Kafka's do); only an EXPIRED session, which ZooKeeper tells on
reconnecting, ends what the broker held.  After a reconnect the partition
states are read again before the session is called CONNECTED, so a leader
resumes only on a fresh view.
"""

from __future__ import annotations

import enum
import logging
import threading

from kazoo.client import KazooState
from kazoo.exceptions import KazooException

from hpbroker.cluster.watcher import ImageWatcher

log = logging.getLogger(__name__)


class Session(enum.Enum):
    CONNECTED = 0  # connected, and the states read since the last reconnect
    SUSPENDED = 1  # the connection is down; the session may well live on
    EXPIRED = 2  # ZooKeeper ended it: nothing held under it can be trusted until read again


class SessionTracker:
    """Runs ``on_image()`` (the watcher's image changed: the callee reads it,
    under whatever lock orders its publications) and ``on_session(Session)``
    for every change, and ``on_tick()`` at least every ``tick_s``, on one
    thread of its own."""

    def __init__(self, client, watcher: ImageWatcher):
        self.client = client
        self.watcher = watcher
        self.session = Session.CONNECTED  # as kazoo last said (CONNECTED only once the states were read)
        self._reconnected = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        client.add_listener(self._on_state)

    def start(self, on_image, on_session, on_tick=lambda: None, tick_s: float = 1.0) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_image, on_session, on_tick, tick_s),
                                        name="cluster-image", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self.watcher.poke()

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: only note it and wake the publisher
        if state == KazooState.CONNECTED:
            self._reconnected = True
        elif state == KazooState.LOST:
            self.session = Session.EXPIRED
        elif self.session is Session.CONNECTED:
            self.session = Session.SUSPENDED
        self.watcher.poke()

    def _run(self, on_image, on_session, on_tick, tick_s: float) -> None:
        try:
            self._track(on_image, on_session, on_tick, tick_s)
        except Exception:  # noqa: BLE001 - logged; the thread must not end silently (nobody would renew)
            log.exception("tracking the ZooKeeper session failed; it is no longer published")

    def _track(self, on_image, on_session, on_tick, tick_s: float) -> None:
        watcher = self.watcher
        generation, published = -1, Session.CONNECTED
        while not self._stopped.is_set():
            changed = watcher.wait_changed(generation, timeout=tick_s)
            if self._stopped.is_set():
                return
            on_tick()
            if self._reconnected:
                self._reconnected = False
                try:
                    watcher.reread_states()
                    self.session = Session.CONNECTED
                except KazooException as exc:
                    log.warning("re-reading partition states after a reconnect failed: %r", exc)
                    self._reconnected = True
                    self._stopped.wait(0.2)
                    continue
            session = self.session
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
                on_image()
