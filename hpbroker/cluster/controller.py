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
  share of led partitions drifts past ``leader.imbalance.per.broker.percentage``;
  an unclean election is run on request (``/admin/unclean_leader_election``);
* reassignments (Kafka's KIP-455, kept in the topic znode as replicas plus
  ``adding_replicas``/``removing_replicas``): the leader epoch is bumped when a
  partition's replica set changes, so its leader takes the new followers in;
  once every target replica is in the ISR, the leader is kept if it is in the
  target (else one is elected from it), the ISR shrinks to the target and the
  assignment becomes the target, in one transaction.  Kafka's legacy
  ``/admin/reassign_partitions`` starts reassignments too; each of its entries
  is removed when done (or refused), the znode when empty.

Fencing: every write is a ZooKeeper transaction that first checks the version
of ``/controller_epoch`` this controller set when it took over, so a
controller that was replaced (paused, partitioned) cannot write, and the state
znode's own version, so a write based on a stale read fails and is redone
from the newer image.  A fenced controller that still holds ``/controller``
deletes it, so the election runs again rather than leaving no controller.
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
from hpbroker.cluster import election, reassignment, znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.watcher import ImageWatcher
from hpbroker.sentinels import NO_LEADER

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
        # requests read by watches on kazoo's thread: path -> (partitions, znode version)
        self._requests: dict[str, tuple[list[tuple[str, int]], int]] = {
            znodes.PREFERRED_REPLICA_ELECTION: ([], -1), znodes.UNCLEAN_LEADER_ELECTION: ([], -1)}
        self._legacy_reassignment: tuple[list[tuple[str, int, list[int]]], int] | None = None
        self._requests_lock = threading.Lock()
        # the replica set each partition's leader was last given an epoch under, by this controller
        self._announced: dict[tuple[str, int], tuple[int, ...] | None] = {}
        self._new_term = False
        self._last_imbalance_check = time.monotonic()

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        self.client.add_listener(self._on_session_state)
        DataWatch(self.client, znodes.PREFERRED_REPLICA_ELECTION,
                  self._request_watch(znodes.PREFERRED_REPLICA_ELECTION, znodes.decode_preferred_election))
        DataWatch(self.client, znodes.UNCLEAN_LEADER_ELECTION,
                  self._request_watch(znodes.UNCLEAN_LEADER_ELECTION, znodes.decode_unclean_election))
        DataWatch(self.client, znodes.REASSIGN_PARTITIONS, self._on_legacy_reassignment)
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
                if self._holds_controller_znode():
                    self.client.delete(znodes.CONTROLLER)
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
            if self._holds_controller_znode():
                # ours from a term that ended fenced: give it up so a fresh election runs
                self.client.delete(znodes.CONTROLLER)
            return  # another broker is controller; the watcher wakes us when it goes
        try:
            self._bump_epoch()
        except (BadVersionError, NodeExistsError):
            # another broker bumped it first: it won a race we thought we had
            self.client.delete(znodes.CONTROLLER)
            return
        self._announced = {}
        self._new_term = True
        self._active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)

    def _holds_controller_znode(self) -> bool:
        try:
            _data, stat = self.client.get(znodes.CONTROLLER)
        except NoNodeError:
            return False
        client_id = self.client.client_id
        assert client_id is not None  # the session answered the read
        return stat.ephemeralOwner == client_id[0]

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
        # The image can lag our own create (its watch re-reads the znode on
        # kazoo's thread), so another broker named there is checked in ZooKeeper.
        if image.controller_id not in (self.broker_id, -1) and not self._holds_controller_znode():
            raise Fenced(f"/controller names broker {image.controller_id}")
        if self._new_term:
            self._reread_requests()
            self._new_term = False
        self._delete_topics(image)
        leaving = image.shutting_down
        live = image.live - leaving
        self._reassign_from_znode(image)
        preferred_wanted = set(self._take_requests(znodes.PREFERRED_REPLICA_ELECTION)) | self._imbalanced(image, live)
        unclean_wanted = set(self._take_requests(znodes.UNCLEAN_LEADER_ELECTION))
        seen = set()
        for topic, p, replicas, state in image.partitions():
            if topic in image.topics_being_deleted:
                continue
            key = (topic, p)
            seen.add(key)
            if state is None:
                self._initialize(image, topic, p, replicas, live)
                continue
            reassigning = znodes.being_reassigned(image.topics[topic], p)
            if reassigning and self._complete_reassignment(image.topics[topic], p, state, live):
                continue
            chosen = self._next_leadership(replicas, state, live, leaving, image.brokers,
                                           preferred=key in preferred_wanted, unclean=key in unclean_wanted)
            if chosen is None:
                continue
            bounced_leader = state.registered_since(state.leader, image.brokers)
            # A leader learns its replica set when it takes an epoch: a new set
            # (a reassignment started, redirected or cancelled) needs a new epoch,
            # as Kafka's controller bumps it; a new controller does so for every
            # reassignment it finds in progress.
            announced = self._announced.setdefault(key, None if reassigning else tuple(replicas))
            announce = announced != tuple(replicas) and chosen.leader != NO_LEADER
            if announce or bounced_leader or (chosen.leader, chosen.isr) != (state.leader, state.isr):
                # a leader that restarted since this state leads again only under a new epoch
                bump = announce or chosen.leader != state.leader or bounced_leader
                epoch = state.leader_epoch + (1 if bump else 0)
                new = znodes.PartitionState(chosen.leader, epoch, chosen.isr, self.epoch, state.zk_version)
                if self._write_state(topic, p, new):
                    if bump:
                        self._announced[key] = tuple(replicas)
                    log.info("%s-%d: leader %d -> %d (epoch %d), isr %s -> %s, replicas %s", topic, p,
                             state.leader, chosen.leader, epoch, state.isr, chosen.isr, replicas)
        for key in set(self._announced) - seen:
            del self._announced[key]

    def _initialize(self, image: ClusterImage, topic: str, p: int, replicas: list[int], live: set[int]) -> None:
        in_service = [r for r in replicas if r in live]
        if not in_service:
            return  # no replica can take it yet: initialized when one registers
        state = znodes.PartitionState(in_service[0], 0, in_service, self.epoch)
        try:
            if self._write_state(topic, p, state, create=True):
                self._announced[(topic, p)] = tuple(replicas)
        except NoNodeError:
            pass  # the topic was deleted meanwhile

    def _next_leadership(self, replicas, state, live, leaving, brokers, *, preferred: bool, unclean: bool = False):
        # a replica no longer assigned (a reassignment cancelled or redirected) leaves the ISR, and cannot lead
        assigned_isr = [r for r in state.isr if r in replicas]
        # An ISR member registered again since this state was written is another
        # incarnation than the one judged in sync (restarted, perhaps on an empty
        # disk, while the watch saw no gap): out, as Kafka's controller treats a
        # bounced broker as one that died and came back.
        isr = [r for r in assigned_isr if state.judged_in_sync(r, brokers)]
        leader = state.leader if state.leader in replicas else NO_LEADER
        if leader in leaving:
            found = election.controlled_shutdown(replicas, isr, set(brokers), leaving)
            # nobody else in sync: it keeps leading until it is gone (then offline election)
            return found
        if leader not in live or state.registered_since(leader, brokers):
            found = election.offline_partition(replicas, isr, live)
            if found is None:
                # nobody judged in sync is live: a last in-sync member that restarted
                # leads again (it had everything acknowledged), as in Kafka
                found = election.offline_partition(replicas, [r for r in assigned_isr if r in live], live)
            if found is None and (self.settings.unclean_leader_election or unclean):
                found = election.offline_partition(replicas, [], live, unclean=True)
            if found is None:
                # keep the ISR as it was: its last member may lead again without loss
                return election.Election(NO_LEADER, assigned_isr)
            return found
        isr = [r for r in isr if r in live]
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

    # --- election requests (preferred, unclean) ---------------------------------------------------
    def _request_watch(self, path: str, decode):
        def on_data(data, stat) -> bool:
            if data:
                try:
                    requested = decode(data)
                except znodes.ZnodeFormatError as exc:
                    log.error("ignoring a leader election request: %s", exc)
                    requested = []
                with self._requests_lock:
                    self._requests[path] = (self._requests[path][0] + requested, stat.version)
                self.watcher.poke()
            return not self._stopped.is_set()
        return on_data

    def _reread_requests(self) -> None:
        """On taking over: the requests pending now (those gathered while another
        broker was controller were its to take)."""
        for path, decode in ((znodes.PREFERRED_REPLICA_ELECTION, znodes.decode_preferred_election),
                             (znodes.UNCLEAN_LEADER_ELECTION, znodes.decode_unclean_election)):
            try:
                data, stat = self.client.get(path)
                pending = (decode(data), stat.version) if data else ([], -1)
            except NoNodeError:
                pending = ([], -1)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring a leader election request: %s", exc)
                pending = ([], -1)
            with self._requests_lock:
                self._requests[path] = pending

    def _take_requests(self, path: str) -> list[tuple[str, int]]:
        with self._requests_lock:
            taken, version = self._requests[path]
        if not taken:
            return []
        # Only the version read is deleted: a request written meanwhile stays for
        # the next turn (its watch brings it).  Should the delete fail, the
        # requests stay too.
        self._commit(lambda t: t.delete(path, version=version))
        with self._requests_lock:
            pending, latest = self._requests[path]
            self._requests[path] = (pending[len(taken):], latest)
        return taken

    # --- reassignments ----------------------------------------------------------------------------
    def _complete_reassignment(self, assignment: znodes.TopicAssignment, p: int, state: znodes.PartitionState,
                               live: set[int]) -> bool:
        """Finish the reassignment once every target replica is in the ISR; False
        while it must wait (then the partition is reconciled as any other)."""
        topic = assignment.topic
        target = znodes.target_replicas(assignment, p)
        if not all(r in state.isr for r in target):
            return False
        chosen = election.reassignment(target, state.isr, live, state.leader)
        if chosen is None:
            return False  # no target replica is live: wait for one
        fresh = self._read_assignment(topic)
        if fresh is None:
            return True
        stat_version, current = fresh
        if _partition_of(current, p) != _partition_of(assignment, p):
            return True  # changed since the image: redo from the newer one
        final = znodes.reassignment_completed(current, p)
        new = znodes.PartitionState(chosen.leader, state.leader_epoch + 1, chosen.isr, self.epoch, state.zk_version)

        def build(transaction):
            transaction.set_data(znodes.topic_path(topic), final.encode(), version=stat_version)
            transaction.set_data(znodes.partition_state_path(topic, p), new.encode(), version=state.zk_version)
        if self._commit(build):
            self._announced[(topic, p)] = tuple(target)
            log.info("%s-%d: reassignment to %s completed: leader %d -> %d (epoch %d), isr %s -> %s", topic, p,
                     target, state.leader, chosen.leader, new.leader_epoch, state.isr, chosen.isr)
        return True

    def _read_assignment(self, topic: str) -> tuple[int, znodes.TopicAssignment] | None:
        """The topic znode as it is now, with its version: the base of a version-checked rewrite."""
        try:
            data, stat = self.client.get(znodes.topic_path(topic))
            return stat.version, znodes.TopicAssignment.decode(topic, data)
        except NoNodeError:
            return None  # deleted meanwhile
        except znodes.ZnodeFormatError as exc:
            log.error("cannot reassign partitions of topic %s: %s", topic, exc)
            return None

    def _on_legacy_reassignment(self, data, stat) -> bool:
        entries = None
        if data:
            try:
                entries = (znodes.decode_reassignment(data), stat.version)
            except znodes.ZnodeFormatError as exc:
                log.error("ignoring %s: %s", znodes.REASSIGN_PARTITIONS, exc)
        with self._requests_lock:
            self._legacy_reassignment = entries
        self.watcher.poke()
        return not self._stopped.is_set()

    def _reassign_from_znode(self, image: ClusterImage) -> None:
        """Start what ``/admin/reassign_partitions`` asks that is not under way;
        drop the entries that are done, refused, or of partitions that are gone."""
        with self._requests_lock:
            legacy = self._legacy_reassignment
        if legacy is None:
            return
        entries, version = legacy
        in_service = image.live - image.shutting_down  # where replicas may be added, as Kafka's live brokers
        keep, starts = [], {}
        for topic, p, target in entries:
            assignment = None if topic in image.topics_being_deleted else image.topics.get(topic)
            if assignment is not None and p in assignment.partitions:
                if znodes.being_reassigned(assignment, p):
                    if znodes.target_replicas(assignment, p) == target:
                        keep.append((topic, p, target))  # under way
                        continue
                elif assignment.partitions[p] == target:
                    log.info("%s-%d: reassignment to %s (%s) done", topic, p, target, znodes.REASSIGN_PARTITIONS)
                    continue
            _unchanged, outcomes = reassignment.plan(topic, assignment, {p: target}, in_service)
            if outcomes[p].error != reassignment.ACCEPTED.error:
                log.warning("%s-%d: refusing the reassignment to %s in %s: %s", topic, p, target,
                            znodes.REASSIGN_PARTITIONS, outcomes[p].message)
                continue
            starts.setdefault(topic, {})[p] = target
            keep.append((topic, p, target))
        for topic, changes in sorted(starts.items()):
            self._start_reassignments(topic, changes, in_service, version)
        if len(keep) == len(entries):
            return
        if keep:
            self._commit(lambda t: t.set_data(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(keep),
                                              version=version))
        else:
            self._commit(lambda t: t.delete(znodes.REASSIGN_PARTITIONS, version=version))

    def _start_reassignments(self, topic: str, changes: dict[int, list[int]], live: set[int],
                             legacy_version: int) -> None:
        fresh = self._read_assignment(topic)
        if fresh is None:
            return
        stat_version, current = fresh
        planned, _outcomes = reassignment.plan(topic, current, changes, live)
        if planned is None:
            return  # already under way (the image had not caught up)

        def build(transaction):
            # the znode must still ask for it: a later request (which removes the
            # entry) may have been written since the copy this is based on
            transaction.check(znodes.REASSIGN_PARTITIONS, legacy_version)
            transaction.set_data(znodes.topic_path(topic), planned.encode(), version=stat_version)
        if self._commit(build):
            log.info("topic %s: reassigning %s", topic, {p: planned.partitions[p] for p in changes})

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


def _partition_of(assignment: znodes.TopicAssignment, p: int) -> tuple:
    return (assignment.partitions.get(p), assignment.adding_replicas.get(p, []),
            assignment.removing_replicas.get(p, []))
