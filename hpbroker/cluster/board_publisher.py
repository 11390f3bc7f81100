"""The acceptor's side of the broker's one ZooKeeper session: what its
workers learn of it and what they do with it.

The session tracker's news (each new cluster image, each change of the
session's state) is written to the cluster board in shared memory, which
wakes every worker; its ticks renew the board's deadline, so workers notice
when nobody tracks the session any more (the acceptor stopped or hung).  The
workers' own ZooKeeper operations come in through the proxy
(``zk_proxy.ProxyServer``) and are made on the same session.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time

from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.session_tracker import Session, SessionTracker
from hpbroker.cluster.watcher import ImageWatcher
from hpbroker.cluster.zk_proxy import ProxyServer
from hpbroker.shared.cluster_board import ClusterBoard, ImageTooLarge

log = logging.getLogger(__name__)


def encode_image(image: ClusterImage) -> bytes:
    # pickle: the board is written by this broker's acceptor only and mapped by its own processes
    return pickle.dumps(image, protocol=pickle.HIGHEST_PROTOCOL)


def decode_image(data: bytes) -> ClusterImage:
    return pickle.loads(data)


class BoardPublisher:
    def __init__(self, client, watcher: ImageWatcher, board: ClusterBoard, session_timeout_ms: int, broker_tag: str):
        self.watcher = watcher
        self.board = board
        self.session_s = session_timeout_ms / 1000
        self._lock = threading.Lock()  # the board has one writer: the tracker's thread or a proxied re-read
        self._session = Session.CONNECTED
        self.board.publish(encode_image(watcher.image()), self._session.value)  # before any worker is forked
        self._renew()
        self.tracker = SessionTracker(client, watcher)
        self.tracker.start(self._on_image, self._on_session, on_tick=self._renew, tick_s=self.session_s / 6)
        self.proxy = ProxyServer(client, broker_tag, self.reread)

    def _renew(self) -> None:
        # workers trust the session for half a timeout past the last renewal; renewed every sixth
        self.board.renew(time.monotonic() + self.session_s / 2)

    def _publish(self, image: ClusterImage) -> int:
        """The board's new generation (the caller holds the lock)."""
        encoded = encode_image(image)
        try:
            return self.board.publish(encoded, self._session.value)
        except ImageTooLarge as exc:  # the workers keep the last image; the session goes on being told
            log.error("%s: the workers keep the last one that fitted", exc)
            return self.board.publish(None, self._session.value)

    def _on_image(self) -> None:
        # the image as it is now, taken under the lock: a copy taken before it could be older
        # than one a re-read published meanwhile, and workers must never see an image go back
        with self._lock:
            self._publish(self.watcher.image())

    def _on_session(self, session: Session) -> None:
        # with the image as it is now: a session CONNECTED again comes with the
        # states just read, and a worker acts on both at once
        with self._lock:
            self._session = session
            self._publish(self.watcher.image())

    def reread(self) -> int:
        """Read the partition states again (a worker doubted its leaderships) and
        publish the image with them; the board's new generation."""
        self.watcher.reread_states()
        with self._lock:
            self._renew()
            return self._publish(self.watcher.image())

    def close(self) -> None:
        self.proxy.close()
        self.tracker.stop()

    def close_in_child(self) -> None:
        self.proxy.close_in_child()
