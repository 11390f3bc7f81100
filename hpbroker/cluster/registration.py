"""A broker joins the cluster: the cluster id, its broker id, its ephemeral node.

Kafka's rules: the first broker to start writes ``/cluster/id``, every later
one reads it and refuses to run if its ``meta.properties`` names another
cluster; a broker without a configured id takes ``/brokers/seqid``'s next
version above ``reserved.broker.max.id``; ``/brokers/ids/<id>`` is ephemeral,
so it vanishes with the session, and a second live broker with the same id is
refused rather than allowed to take the first one's place.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from hpbroker.cluster import znodes

log = logging.getLogger(__name__)

# pauses between attempts to register again in a session that refused it
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0


class BrokerIdInUse(Exception):
    """Another live broker is registered under this broker id."""


class ClusterIdMismatch(Exception):
    """The log dirs belong to another cluster than the one in ZooKeeper."""


def ensure_layout(client: KazooClient) -> None:
    for path in znodes.PERSISTENT_PATHS:
        client.ensure_path(path)


def cluster_id(client: KazooClient, proposed: str) -> str:
    """The cluster's id: ``proposed`` if this broker is the first, else the one stored."""
    try:
        client.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(proposed), makepath=True)
        log.info("created cluster id %s in ZooKeeper", proposed)
        return proposed
    except NodeExistsError:
        data, _stat = client.get(znodes.CLUSTER_ID)
        return znodes.decode_cluster_id(data)


def check_cluster_id(stored: str | None, in_zookeeper: str) -> None:
    if stored is not None and stored != in_zookeeper:
        raise ClusterIdMismatch(
            f"the log dirs belong to cluster {stored} (meta.properties) but ZooKeeper holds cluster "
            f"{in_zookeeper}: this broker is pointed at the wrong cluster (check zookeeper.connect)")


def generate_broker_id(client: KazooClient) -> int:
    """Each write to ``/brokers/seqid`` bumps its version: one id per write,
    unique across the cluster without a lock."""
    client.ensure_path(znodes.BROKER_SEQID)
    stat = client.set(znodes.BROKER_SEQID, b"")
    return znodes.RESERVED_BROKER_MAX_ID + stat.version


class Registration:
    """Keeps ``/brokers/ids/<id>`` present for as long as this broker runs.

    A lost session takes the node with it; when kazoo opens a new session the
    node is created again (on kazoo's worker, not its connection thread), and
    tried again while the session stays but the attempt fails: a broker
    misconfigured with this id may have taken it meanwhile and be stopped
    later, and nothing else would bring this one back.  ``on_lost`` and
    ``on_registered`` let the broker stop acting as leader while it is not a
    member, and resume once it is again."""

    def __init__(self, client: KazooClient, registration: znodes.BrokerRegistration,
                 on_lost=lambda: None, on_registered=lambda: None, stale_wait_s: float = 0.0):
        self.client = client
        # A broker restarted after a crash finds its old node until the dead
        # session expires: wait that long before calling the id taken.
        self.stale_wait_s = stale_wait_s
        self.registration = registration
        self.path = znodes.broker_path(registration.broker_id)
        self.on_lost = on_lost
        self.on_registered = on_registered
        self.registered = threading.Event()
        self._closed = threading.Event()  # set by close(); also wakes a pause between attempts
        self._registering = threading.Lock()  # one attempt at a time: a reconnect may come during a pause

    def start(self) -> None:
        """Register now (raising ``BrokerIdInUse``), then follow the session."""
        self._create()
        self.client.add_listener(self._on_state)

    def _create(self, deadline: float | None = None) -> None:
        data = self.registration.encode()
        try:
            self.client.create(self.path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                _data, stat = self.client.get(self.path)
            except NoNodeError:  # its owner's session ended between the two calls
                return self._create(deadline)
            client_id = self.client.client_id
            assert client_id is not None  # the session answered the read
            if stat.ephemeralOwner != client_id[0]:
                deadline = time.monotonic() + self.stale_wait_s if deadline is None else deadline
                if self._outwait_owner(deadline):
                    return self._create(deadline)
                raise BrokerIdInUse(
                    f"broker.id {self.registration.broker_id} is registered by another live broker "
                    f"(ZooKeeper session 0x{stat.ephemeralOwner:x}): give each broker its own broker.id") from None
            self.client.set(self.path, data)  # ours, from before a reconnect
        self.registered.set()
        log.info("registered as broker %d at %s", self.registration.broker_id, self.registration.endpoint)
        self.on_registered()

    def _outwait_owner(self, deadline: float) -> bool:
        """True once the node another session holds is gone, False at the deadline."""
        gone = threading.Event()
        while time.monotonic() < deadline:
            gone.clear()
            if self.client.exists(self.path, watch=lambda _event: gone.set()) is None:
                return True
            if not self.stale_wait_s or time.monotonic() >= deadline:
                break
            log.info("broker %d is still registered by another session (a crashed predecessor?); waiting up to "
                     "%.0f s for it to expire", self.registration.broker_id, deadline - time.monotonic())
            gone.wait(max(0.0, deadline - time.monotonic()))
        return False

    def _on_state(self, state: str) -> bool:
        if self._closed.is_set():
            return True  # removes the listener
        if state == KazooState.LOST:
            self.registered.clear()
            log.warning("ZooKeeper session lost: broker %d is not registered until a new session opens",
                        self.registration.broker_id)
            self.on_lost()
        elif state == KazooState.CONNECTED and not self.registered.is_set():
            self.client.handler.spawn(self._register_again)
        return False

    def _register_again(self) -> None:
        """Register in the new session, trying again after a growing pause
        while it fails and the session stays connected (a reconnect spawns a
        fresh attempt).  A node found there is another live broker's, not a
        crashed predecessor's (this process is the predecessor): no waiting
        it out, the pauses do that."""
        pause = RETRY_FIRST_S
        with self._registering:
            while (not self._closed.is_set() and not self.registered.is_set()
                   and self.client.state == KazooState.CONNECTED):
                try:
                    self._create(deadline=0.0)
                    return
                except (BrokerIdInUse, KazooException) as exc:
                    log.error("broker %d could not register again: %s; trying again in %.1f s",
                              self.registration.broker_id, exc, pause)
                except Exception:
                    log.exception("registering broker %d again failed; trying again in %.1f s",
                                  self.registration.broker_id, pause)
                self._closed.wait(pause)
                pause = min(pause * 2, RETRY_MAX_S)

    def close(self) -> None:
        self._closed.set()
        try:
            self.client.delete(self.path)
        except (NoNodeError, Exception):  # the session may already be gone
            pass
