"""The controller: one broker at a time decides leaders and ISRs in ZooKeeper.

Every broker runs this; the one that creates the ephemeral ``/controller``
acts, the others wait for it to vanish.  Acting means reconciling: each time
the cluster image changes the controller compares what is with what should be
and writes the difference, so a missed event, or a new controller taking over
half-done work, needs no special path:

* a partition without a state whose replicas have a live broker gets one
  (leader: the first live replica; ISR: the live replicas);
* a partition whose leader is gone gets a leader from its ISR (``election``),
  or leader -1 with its ISR kept, so the last in-sync replica can lead again
  without loss when it returns;
* dead brokers leave the ISRs of partitions that keep their leader;
* a broker in controlled shutdown hands over its leaderships and leaves ISRs;
* topics queued under ``/admin/delete_topics`` are removed;
* preferred leaders get their partitions back, on request and when a broker's
  share of led partitions drifts past ``leader.imbalance.per.broker.percentage``.

Fencing: every write is a ZooKeeper transaction that first checks the version
of ``/controller_epoch`` this controller set when it took over, so a
controller that was replaced (paused, partitioned) cannot write, and the state
znode's own version, so a write based on a stale read fails and is redone
from the newer image.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from hpbroker.clock import now_ms
from hpbroker.cluster import election, znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.watcher import ImageWatcher

log = logging.getLogger(__name__)


class Fenced(Exception):
    """Another controller has taken over since this one's epoch."""


@dataclass(frozen=True)
class ControllerSettings:
    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_per_broker_percentage: int = 10


class Controller:
    def __init__(self, client: KazooClient, broker_id: int, watcher: ImageWatcher,
                 settings: ControllerSettings = ControllerSettings()):
        self.client = client
        self.broker_id = broker_id
        self.watcher = watcher
        self.settings = settings
        self.epoch = 0
        self._epoch_version = -1  # /controller_epoch's znode version while active
        self._active = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._preferred_requests: list[tuple[str, int]] = []  # filled on kazoo's thread
        self._requests_lock = threading.Lock()
        self._last_imbalance_check = time.monotonic()

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        self.client.add_listener(self._on_session_state)
        DataWatch(self.client, znodes.PREFERRED_REPLICA_ELECTION, self._on_preferred_request)
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Resign: delete ``/controller`` if it is ours, so another broker takes over now."""
        self._stopped.set()
        self.watcher.poke()
        if self._thread is not None:
            self._thread.join(10)
        if self._active:
            self._active = False
            try:
                _data, stat = self.client.get(znodes.CONTROLLER)
                if stat.ephemeralOwner == self.client.client_id[0]:
                    self.client.delete(znodes.CONTROLLER, version=stat.version)
            except KazooException:
                pass  # the session ends with the broker anyway

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        generation = -1
        while not self._stopped.is_set():
            try:
                if not self._active:
                    self._try_to_become_controller()
                if self._active:
                    self._reconcile(self.watcher.image())
            except Fenced as exc:
                log.warning("broker %d is no longer the controller: %s", self.broker_id, exc)
                self._active = False
            except KazooException as exc:  # connection trouble: the next change or tick retries
                log.warning("controller work on broker %d failed, will retry: %r", self.broker_id, exc)
                self._stopped.wait(0.5)
            except Exception:
                log.exception("controller work on broker %d failed, will retry", self.broker_id)
                self._stopped.wait(1.0)
            # sleep until the image changes (or a tick for the imbalance check)
            generation = self.watcher.wait_changed(generation, timeout=1.0)

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.LOST and self._active:
            log.warning("broker %d lost its ZooKeeper session: it is no longer the controller", self.broker_id)
            self._active = False

    def _try_to_become_controller(self) -> None:
        data = znodes.encode_controller(self.broker_id, now_ms())
        try:
            self.client.create(znodes.CONTROLLER, data, ephemeral=True)
        except NodeExistsError:
            return  # another broker is controller; the watcher wakes us when it goes
        try:
            self._bump_epoch()
        except (BadVersionError, NodeExistsError):
            # another broker bumped it first: it won a race we thought we had
            self.client.delete(znodes.CONTROLLER)
            return
        self._active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)

    def _bump_epoch(self) -> None:
        try:
            data, stat = self.client.get(znodes.CONTROLLER_EPOCH)
        except NoNodeError:
            self.client.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
            self.epoch, self._epoch_version = 1, 0
            return
        epoch = znodes.decode_controller_epoch(data) + 1
        stat = self.client.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch), version=stat.version)
        self.epoch, self._epoch_version = epoch, stat.version

    # --- fenced writes ---------------------------------------------------------------------
    def _commit(self, build) -> bool:
        """Run a transaction behind the epoch check; False when a state it was
        based on changed meanwhile (redo from the newer image)."""
        transaction = self.client.transaction()
        transaction.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
        build(transaction)
        results = transaction.commit()
        # a failed operation fails them all: the one that failed carries its own error
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise Fenced(f"/controller_epoch moved past epoch {self.epoch}")
        return not any(isinstance(r, Exception) for r in results)

    def _write_state(self, topic: str, partition: int, state: znodes.PartitionState, *, create: bool = False) -> bool:
        path = znodes.partition_state_path(topic, partition)
        if create:
            self.client.ensure_path(path.rsplit("/", 1)[0])
            return self._commit(lambda t: t.create(path, state.encode()))
        return self._commit(lambda t: t.set_data(path, state.encode(), version=state.zk_version))

    # --- reconciling ---------------------------------------------------------------------------
    def _reconcile(self, image: ClusterImage) -> None:
        if image.controller_id not in (self.broker_id, -1):
            raise Fenced(f"/controller names broker {image.controller_id}")
        self._delete_topics(image)
        leaving = image.shutting_down
        live = image.live - leaving
        preferred_wanted = set(self._take_preferred_requests()) | self._imbalanced(image, live)
        for topic, p, replicas, state in image.partitions():
            if topic in image.topics_being_deleted:
                continue
            if state is None:
                self._initialize(image, topic, p, replicas, live)
                continue
            chosen = self._next_leadership(replicas, state, live, leaving, image.live,
                                           preferred=(topic, p) in preferred_wanted)
            if chosen is not None and (chosen.leader, chosen.isr) != (state.leader, state.isr):
                epoch = state.leader_epoch + (1 if chosen.leader != state.leader else 0)
                new = znodes.PartitionState(chosen.leader, epoch, chosen.isr, self.epoch, state.zk_version)
                if self._write_state(topic, p, new):
                    log.info("%s-%d: leader %d -> %d (epoch %d), isr %s -> %s", topic, p, state.leader,
                             chosen.leader, epoch, state.isr, chosen.isr)

    def _initialize(self, image: ClusterImage, topic: str, p: int, replicas: list[int], live: set[int]) -> None:
        in_service = [r for r in replicas if r in live]
        if not in_service:
            return  # no replica can take it yet: initialized when one registers
        state = znodes.PartitionState(in_service[0], 0, in_service, self.epoch)
        try:
            self._write_state(topic, p, state, create=True)
        except NoNodeError:
            pass  # the topic was deleted meanwhile

    def _next_leadership(self, replicas, state, live, leaving, registered, *, preferred: bool):
        if state.leader in leaving:
            found = election.controlled_shutdown(replicas, state.isr, registered, leaving)
            # nobody else in sync: it keeps leading until it is gone (then offline election)
            return found
        if state.leader not in live:
            found = election.offline_partition(replicas, state.isr, live, unclean=self.settings.unclean_leader_election)
            if found is None:
                # keep the ISR as it was: its last member may lead again without loss
                return election.Election(election.NO_LEADER, state.isr)
            return found
        isr = [r for r in state.isr if r in live]
        if preferred and replicas[0] != state.leader:
            found = election.preferred_replica(replicas, isr, live)
            if found is not None:
                return found
        return election.Election(state.leader, isr)

    # --- deletion ---------------------------------------------------------------------------------
    def _delete_topics(self, image: ClusterImage) -> None:
        for topic in sorted(image.topics_being_deleted):
            paths = self._subtree(znodes.topic_path(topic)) if topic in image.topics else []
            if self.client.exists(znodes.topic_config_path(topic)):
                paths.append(znodes.topic_config_path(topic))
            paths.append(f"{znodes.DELETE_TOPICS}/{topic}")

            def build(transaction, paths=paths):
                for path in paths:
                    transaction.delete(path)
            if self._commit(build):
                log.info("deleted topic %s", topic)

    def _subtree(self, path: str) -> list[str]:
        """``path`` and everything under it, children before parents."""
        try:
            children = self.client.get_children(path)
        except NoNodeError:
            return []
        found = []
        for child in children:
            found += self._subtree(f"{path}/{child}")
        return found + [path]

    # --- preferred leaders -------------------------------------------------------------------------
    def _on_preferred_request(self, data, _stat) -> bool:
        if data:
            try:
                requested = znodes.decode_preferred_election(data)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring a preferred replica election request: %s", exc)
                requested = []
            with self._requests_lock:
                self._preferred_requests.extend(requested)
            self.watcher.poke()
        return not self._stopped.is_set()

    def _take_preferred_requests(self) -> list[tuple[str, int]]:
        with self._requests_lock:
            taken, self._preferred_requests = self._preferred_requests, []
        if not taken:
            return []
        try:
            self.client.delete(znodes.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            pass
        return taken

    def _imbalanced(self, image: ClusterImage, live: set[int]) -> set[tuple[str, int]]:
        """Kafka's auto rebalance: for each broker, the partitions it prefers but
        does not lead; all of them when they are more than the allowed share."""
        if not self.settings.auto_leader_rebalance:
            return set()
        now = time.monotonic()
        if now - self._last_imbalance_check < self.settings.imbalance_check_interval_s:
            return set()
        self._last_imbalance_check = now
        preferred_of: dict[int, list[tuple[str, int, bool]]] = {}
        for topic, p, replicas, state in image.partitions():
            if state is not None and replicas:
                preferred_of.setdefault(replicas[0], []).append((topic, p, state.leader == replicas[0]))
        wanted = set()
        for broker, partitions in preferred_of.items():
            if broker not in live:
                continue
            not_led = [(t, p) for t, p, led in partitions if not led]
            if 100 * len(not_led) > self.settings.imbalance_per_broker_percentage * len(partitions):
                wanted.update(not_led)
        return wanted
