"""One broker's membership of the cluster, as its acceptor runs it.

Joining: connect (one clear error when ZooKeeper does not answer), settle the
cluster id with ``meta.properties``, take a broker id (configured, stored, or
generated), register, then watch the cluster and stand for controller.  The
acceptor lends this session to its workers (``board_publisher``).

Leaving: a controlled shutdown asks the controller to move this broker's
leaderships away and waits until none is left, in the image and then in
ZooKeeper's own partition states (or the time is up), so producers see one
retry, not an outage; then the session ends and the registration vanishes at
once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from hpbroker.clock import now_ms
from hpbroker.cluster import registration, session, znodes
from hpbroker.cluster.controller import Controller, ControllerSettings
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.watcher import ImageWatcher

log = logging.getLogger(__name__)


class ClusterJoinError(Exception):
    """The broker cannot join: ZooKeeper unreachable, a wrong cluster, a taken id."""


@dataclass(frozen=True)
class MemberSettings:
    zookeeper_connect: str
    session_timeout_ms: int = 18000
    connection_timeout_ms: int = 18000
    broker_id: int | None = None  # None: the stored one, else generated
    generate_broker_id: bool = True
    host: str = "127.0.0.1"
    port: int = 9092
    rack: str | None = None
    listener: str = "PLAINTEXT"  # the brokers' listener's name, and its security protocol, for the registration
    security_protocol: str = "PLAINTEXT"
    other_endpoints: tuple[znodes.Endpoint, ...] = ()  # the clients' other listeners
    controller: ControllerSettings = ControllerSettings()


class ClusterMember:
    def __init__(self, settings: MemberSettings):
        self.settings = settings
        self.client = None
        self.broker_id = -1
        self.cluster_id = ""
        self.registration: registration.Registration | None = None
        self.watcher: ImageWatcher | None = None
        self.controller: Controller | None = None
        self._session_ok = threading.Event()

    # --- joining ------------------------------------------------------------------------
    def join(self, stored_broker_id: int | None, stored_cluster_id: str | None, new_cluster_id: str) -> None:
        """Raises ClusterJoinError with a one-line reason."""
        s = self.settings
        try:
            self.client = session.connect(s.zookeeper_connect, s.session_timeout_ms, s.connection_timeout_ms)
        except (session.ZooKeeperUnavailable, ValueError) as exc:
            raise ClusterJoinError(str(exc)) from None
        try:
            registration.ensure_layout(self.client)
            self.cluster_id = registration.cluster_id(self.client, stored_cluster_id or new_cluster_id)
            registration.check_cluster_id(stored_cluster_id, self.cluster_id)
            self.broker_id = self._broker_id(stored_broker_id)
            self.registration = registration.Registration(
                self.client, znodes.BrokerRegistration(self.broker_id, s.host, s.port, s.rack, s.listener,
                                                       timestamp_ms=now_ms(),
                                                       security_protocol=s.security_protocol,
                                                       others=s.other_endpoints),
                on_lost=self._session_ok.clear, on_registered=self._session_ok.set,
                stale_wait_s=s.session_timeout_ms / 1000 + 2)
            self.registration.start()
        except ClusterJoinError:
            self.close()
            raise
        except (registration.ClusterIdMismatch, registration.BrokerIdInUse) as exc:
            self.close()
            raise ClusterJoinError(str(exc)) from None
        except KazooException as exc:
            self.close()
            raise ClusterJoinError(f"ZooKeeper failed while joining: {exc!r}") from None
        self.watcher = ImageWatcher(self.client, self.cluster_id)
        self.watcher.start()
        self.controller = Controller(self.client, self.broker_id, self.watcher, s.controller)
        self.controller.start()

    def _broker_id(self, stored: int | None) -> int:
        configured = self.settings.broker_id
        if configured is not None and configured >= 0:
            if stored is not None and stored != configured:
                raise ClusterJoinError(f"broker.id {configured} does not match broker.id {stored} in meta.properties")
            return configured
        if stored is not None:
            return stored
        if not self.settings.generate_broker_id:
            raise ClusterJoinError("broker.id is not set and broker.id.generation.enable is false")
        assert self.client is not None  # join() connected it
        return registration.generate_broker_id(self.client)

    @property
    def registered(self) -> bool:
        """This broker is a member right now (its session lives and holds its node)."""
        return self._session_ok.is_set()

    def image(self) -> ClusterImage:
        assert self.watcher is not None, "not joined"
        return self.watcher.image()

    # --- leaving ---------------------------------------------------------------------------
    def controlled_shutdown(self, timeout_s: float) -> bool:
        """Move this broker's leaderships away; True when none is left in time."""
        assert self.client is not None and self.watcher is not None, "not joined"
        watcher = self.watcher
        try:
            self.client.create(znodes.controlled_shutdown_path(self.broker_id), ephemeral=True)
        except NodeExistsError:
            pass
        except KazooException as exc:
            log.warning("controlled shutdown could not be requested: %r", exc)
            return False
        deadline = time.monotonic() + timeout_s
        generation = -1
        while time.monotonic() < deadline:
            # The image can lag a leadership the controller has just written (a
            # topic created a moment ago): "none left" is confirmed in ZooKeeper.
            image = watcher.image()
            if not self._handing_over(image.states, image.live) and self._handing_over_per_zookeeper() == []:
                log.info("controlled shutdown: broker %d leads no partition that another replica could take",
                         self.broker_id)
                return True
            generation = watcher.wait_changed(generation, timeout=min(1.0, deadline - time.monotonic()))
        image = watcher.image()
        log.warning("controlled shutdown: broker %d still leads %s after %.0f s", self.broker_id,
                    self._handing_over(image.states, image.live)[:10], timeout_s)
        return False

    def _handing_over(self, states: dict, live) -> list[tuple[str, int]]:
        """Partitions this broker leads that have another in-sync live replica to take them."""
        return [(topic, p) for (topic, p), state in sorted(states.items())
                if state.leader == self.broker_id and any(r != self.broker_id and r in live for r in state.isr)]

    def _handing_over_per_zookeeper(self) -> list[tuple[str, int]] | None:
        """``_handing_over`` from the znodes themselves; None when they cannot be read."""
        client = self.client
        assert client is not None, "not joined"
        try:
            live = {int(c) for c in client.get_children(znodes.BROKER_IDS) if c.isdigit()}
            reads = []
            for topic in client.get_children(znodes.TOPICS):
                try:
                    assignment = znodes.TopicAssignment.decode(topic, client.get(znodes.topic_path(topic))[0])
                except (NoNodeError, znodes.ZnodeFormatError):
                    continue  # being deleted, or unreadable (the watcher logs it)
                reads += [(topic, p, client.get_async(znodes.partition_state_path(topic, p)))
                          for p in assignment.partitions]
            states = {}
            for topic, p, read in reads:
                try:
                    data, stat = read.get()
                    states[(topic, p)] = znodes.PartitionState.decode(topic, p, data, stat.version, stat.mzxid)
                except (NoNodeError, znodes.ZnodeFormatError):
                    continue
        except KazooException as exc:
            log.warning("controlled shutdown: the partition states could not be read: %r", exc)
            return None
        return self._handing_over(states, live)

    def close(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        if self.watcher is not None:
            self.watcher.stop()
        if self.registration is not None:
            self.registration.close()
        if self.client is not None:
            session.close(self.client)
            self.client = None
