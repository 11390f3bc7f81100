"""A worker's replicas in cluster mode: the role of every partition assigned to
this broker and owned by this worker (its single writer), taken from the
cluster image, and what each role does.

Each such partition is a ``Partition`` (``partition.py``) in ``partitions``:

* LEADER: a ``LeaderState`` tracks the followers' fetches; the high watermark
  is the least log end over the ISR; the ISR is shrunk or grown by a
  version-checked write of the partition's state znode; acks=all producers
  and DeleteRecords wait in the purgatory until the partition gets there;
* FOLLOWER: a ``ReplicaFetcher`` per leader broker copies the leader's log,
  truncating first by leader epoch;
* OFFLINE (no leader elected): nothing is served.

A leadership ends when ZooKeeper says the session expired, not when the
connection to it is lost: through a ZooKeeper outage the leaders keep serving
with the ISR they have (nobody can change it meanwhile: the controller cannot
write either), as Kafka's brokers do; ISR changes wait for the connection.
A leader is in doubt, and neither takes writes nor moves its high watermark,
while its session is known to have expired and no new one has read the
states yet, or after this worker was paused (SIGSTOP, a long stall) for long
enough that the session may have expired meanwhile; requests wait out the
doubt (``settled``), which a ZooKeeper round trip ends.  Time it could not
measure (the doubt, a stalled loop) counts for no follower's lag.

Followers are told apart by incarnation: a fetch carries the follower's
broker epoch, and the ISR rules (``replication/isr.py``) count only what the
incarnation ZooKeeper registers now has fetched.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

from hpbroker.clock import SYSTEM, Clock
from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.session_tracker import Session
from hpbroker.replication.fetcher import FetcherSettings, ReplicaFetcher
from hpbroker.replication.isr import LeaderState
from hpbroker.sentinels import NO_LEADER
from hpbroker.server.ownership import partition_owner
from hpbroker.storage import checkpoints
from hpbroker.workers.partition import Leadership, Partition, Role
from hpbroker.workers.publisher import UNPUBLISHED

log = logging.getLogger(__name__)

TICK_S = 0.1  # how often the worker ticks
STALL_S = 1.0  # a tick this late means the loop stalled: the time in between went unmeasured
SETTLE_MAX_S = 10.0  # how long a request waits out a leadership in doubt


@dataclass(frozen=True)
class ReplicaSettings:
    broker_id: int
    fetcher: FetcherSettings
    lag_time_max_ms: int = 30000  # replica.lag.time.max.ms
    session_timeout_ms: int = 18000  # zookeeper.session.timeout.ms


class ReplicaManager:
    def __init__(self, settings: ReplicaSettings, index: int, workers: int, logs, link, *,
                 changed=lambda partition: None, on_leadership=lambda topic, partition, leading: None,
                 current_image=None, clock: Clock = SYSTEM, publisher=UNPUBLISHED):
        self.settings = settings
        self.broker_id = settings.broker_id
        self.index = index
        self.workers = workers
        self.logs = logs
        self.link = link  # SharedLink: propose_isr, confirm, whether the session is tracked
        self.current_image = current_image or link.image  # the image roles are taken from
        self.changed = changed  # (Partition) -> None: the delayed operations on it look again
        self.publisher = publisher  # the shared partition table
        self.on_leadership = on_leadership
        self.clock = clock
        self.image = ClusterImage()
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[tuple[int, str, int], ReplicaFetcher] = {}
        self.session = Session.CONNECTED  # as the link last said
        self.suspect = False  # a pause was seen: wait for the session to be confirmed
        self._last_tick = self.clock.monotonic()
        self._doubt_since: float | None = None  # when the leaderships went into doubt
        self._settled = asyncio.Event()
        self._settled.set()
        self._known_topics: set[str] = set()

    def leaders(self) -> list[Partition]:
        return [p for p in self.partitions.values() if p.role is Role.LEADER]

    # --- doubt --------------------------------------------------------------------------------
    async def settled(self, timeout_s: float | None = None) -> None:
        """Return once the leaderships are not in doubt (or after ``timeout_s``,
        by default the session timeout capped at ``SETTLE_MAX_S``)."""
        if self.trusted():
            return
        if timeout_s is None:
            timeout_s = min(SETTLE_MAX_S, self.settings.session_timeout_ms / 1000)
        try:
            await asyncio.wait_for(self._settled.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass  # still in doubt: the caller answers as a broker that does not lead

    def trusted(self) -> bool:
        """This worker may act on the leaderships its image gives it."""
        return self.session is not Session.EXPIRED and not self.suspect and not self._noticed_pause()

    def _noticed_pause(self) -> bool:
        """True, and leaderships in doubt until the session is confirmed, when the
        last tick is more than half a session timeout ago, or when the acceptor
        stopped tracking the session: it may have expired meanwhile without
        this worker hearing of it."""
        if (self.clock.monotonic() - self._last_tick) * 1000 > self.settings.session_timeout_ms / 2:
            self._suspect_pause("this worker was paused for longer than half the ZooKeeper session timeout")
            return True
        if not self.link.tracked():
            self._suspect_pause("the acceptor stopped renewing its hold on the ZooKeeper session")
            return True
        return False

    def _doubt_begins(self, since: float) -> None:
        if self._doubt_since is None:
            self._doubt_since = since
            self._settled.clear()

    def _doubt_may_end(self) -> None:
        """Leaving doubt: the time it lasted counts for no follower's lag."""
        if self._doubt_since is None or not self.trusted():
            return
        self._skip_unmeasured(self.clock.monotonic() - self._doubt_since)
        self._doubt_since = None
        self._settled.set()
        for partition in self.leaders():
            self.advance(partition)

    def _skip_unmeasured(self, seconds: float) -> None:
        now = self.clock.now_ms()
        for partition in self.leaders():
            assert partition.leadership is not None  # a leader's
            partition.leadership.state.skip_time(int(seconds * 1000), now)

    def _suspect_pause(self, why: str) -> None:
        if self.suspect:
            return
        self.suspect = True
        self.publisher.revoke_lease()
        self._doubt_begins(self._last_tick)
        log.warning("%s: leaderships in doubt until the session is confirmed", why)
        asyncio.get_running_loop().create_task(self._confirm_session())

    async def _confirm_session(self) -> None:
        while True:
            try:
                await self.link.confirm()
                if not self.link.tracked():
                    raise RuntimeError("the acceptor answered but does not renew its hold on the session")
                break
            except Exception as exc:  # noqa: BLE001 - retried until ZooKeeper answers
                log.warning("confirming the ZooKeeper session failed: %r", exc)
                await asyncio.sleep(0.5)
        self._last_tick = self.clock.monotonic()
        self.suspect = False
        self.apply(self.current_image())
        self._doubt_may_end()

    def set_session(self, session: Session) -> None:
        """The link's news; the caller applies the image read with it next (before
        any request waiting out a doubt runs again)."""
        self.session = session
        if session is Session.EXPIRED:
            self.publisher.revoke_lease()
            self._doubt_begins(self.clock.monotonic())
        elif session is Session.CONNECTED:
            self._doubt_may_end()

    # --- the leader's side ----------------------------------------------------------------------
    def _registered(self) -> dict[int, int]:
        """Broker id -> broker epoch of every registered broker, as the image has them."""
        return {broker_id: registration.epoch for broker_id, registration in self.image.brokers.items()}

    def broker_epoch(self) -> int:
        """This broker's own epoch (its registration's zxid); -1 while not registered."""
        registration = self.image.brokers.get(self.broker_id)
        return registration.epoch if registration is not None else -1

    def follower_fetched(self, partition: Partition, replica: int, replica_epoch: int, offset: int,
                         log_start: int) -> bool:
        """Record a follower's fetch (it holds everything below ``offset``): it may
        join the ISR, and the high watermark may move.  False when the partition
        is not led here (the fetch is then answered with the error)."""
        if not partition.follower_fetched(replica, replica_epoch, offset, log_start, self.clock.now_ms()):
            return False
        self._follower_progressed(partition, replica)
        return True

    def _follower_progressed(self, partition: Partition, replica: int) -> None:
        leadership = partition.leadership
        # a fetch can grow the ISR only by its own replica: one already in needs
        # no look (the tick proposes every other change)
        if leadership is not None and replica not in leadership.state.isr:
            wanted = self.wanted_isr(partition)
            if wanted is not None and len(wanted) > len(leadership.state.isr):
                self._propose(partition, wanted)
        self.advance(partition)

    def advance(self, partition: Partition) -> None:
        """Move the high watermark as far as the ISR allows (after an append or a fetch)."""
        if partition.role is not Role.LEADER or not self.trusted():
            return
        leadership = partition.leadership
        assert leadership is not None  # a leader's
        if leadership.state.advance_high_watermark(partition.log.written_offset):
            partition.log.high_watermark = leadership.state.high_watermark
            self.changed(partition)

    def wanted_isr(self, partition: Partition) -> list[int] | None:
        """The ISR this broker, as the partition's leader, would propose now; None
        when the current one is right (or it does not lead the partition)."""
        if partition.role is not Role.LEADER:
            return None
        leadership = partition.leadership
        assert leadership is not None  # a leader's
        return leadership.state.isr_change(partition.log.written_offset, self.clock.now_ms(), self._registered(),
                                           leadership.znode.zxid)

    def _propose(self, partition: Partition, isr: list[int]) -> None:
        # a replica whose broker is not registered, or is in a controlled shutdown,
        # cannot join (as Kafka's KIP-841): the controller would take it out
        # again, and the two writers would fight
        isr = [r for r in isr if r == self.broker_id or (r in self.image.brokers and r not in self.image.shutting_down)]
        leadership = partition.leadership
        assert leadership is not None  # proposed for leaders only
        if (leadership.proposing or sorted(isr) == sorted(leadership.state.isr) or not self.trusted()
                or self.session is not Session.CONNECTED):
            return  # (without a connection the write cannot be made: the ISR stays as it is meanwhile)
        leadership.proposing = True
        base = leadership.znode
        proposed = znodes.PartitionState(self.broker_id, partition.leader_epoch, isr, base.controller_epoch,
                                         base.zk_version)
        asyncio.get_running_loop().create_task(self._write_isr(partition, leadership, proposed))

    async def _write_isr(self, partition: Partition, leadership: Leadership, proposed: znodes.PartitionState) -> None:
        before = list(leadership.state.isr)  # for the log line: an image may apply the change while we wait
        try:
            written = await self.link.propose_isr(partition.topic, partition.index, proposed)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next tick proposes again
            log.warning("%s-%d: could not write the ISR %s: %r", partition.topic, partition.index, proposed.isr, exc)
            written = None
        finally:
            leadership.proposing = False
        if written is None or partition.leadership is not leadership:
            return  # the state changed under us: the image brings the truth
        log.info("%s-%d: ISR %s -> %s", partition.topic, partition.index, before, proposed.isr)
        leadership.znode = written
        leadership.state.isr_applied(written.isr)
        self.advance(partition)
        self.changed(partition)  # a shrunk ISR answers acks=all waiters NOT_ENOUGH_REPLICAS_AFTER_APPEND sooner

    def tick(self) -> None:
        """Every ~100 ms: notice a pause, shrink the ISR of followers that fell behind."""
        now = self.clock.monotonic()
        late = now - self._last_tick
        paused = self._noticed_pause()  # the doubt it starts covers the time lost
        self._last_tick = now
        if not paused and late > STALL_S:
            self._skip_unmeasured(late - TICK_S)  # a stalled loop saw no fetch meanwhile
        if not self.trusted():
            self.publisher.revoke_lease()
            return
        # other workers may answer for our leaders until we would doubt them ourselves
        self.publisher.grant_lease(min(now + self.settings.session_timeout_ms / 2000, self.link.tracked_until()))
        for partition in self.leaders():
            wanted = self.wanted_isr(partition)
            if wanted is not None:
                self._propose(partition, wanted)
            else:
                self.advance(partition)

    # --- roles from the image -------------------------------------------------------------------------
    def apply(self, image: ClusterImage) -> None:
        """Take every role the image gives this worker; drop the others."""
        self.image = image
        gone = self._known_topics - set(image.topics)
        self._known_topics = set(image.topics) - set(image.topics_being_deleted)
        assigned = set()
        for topic, index, replicas, state in image.partitions():
            if (self.broker_id not in replicas or topic in image.topics_being_deleted
                    or partition_owner(topic, index, self.workers) != self.index):
                continue
            partition = self._partition(image, topic, index)
            if partition is None:
                continue
            assigned.add(partition.key)
            if state is None or state.leader == NO_LEADER:
                self._go_offline(partition, state)
            elif state.leader == self.broker_id:
                self._lead(partition, state, replicas)
            else:
                self._follow(partition, state, image)
        for key in set(self.partitions) - assigned:
            self._go_offline(self.partitions.pop(key), None)
            self.publisher.withdraw(*key)
        for topic in sorted(gone | image.topics_being_deleted):
            self._delete_local(topic)
        self._delete_moved_away(image)
        self._close_idle_fetchers()

    def _partition(self, image: ClusterImage, topic: str, index: int) -> Partition | None:
        """The partition here, its log created empty on first assignment; a leftover
        of an earlier topic of the same name (another id) is replaced."""
        wanted_id = image.topics[topic].topic_id
        topic_id = checkpoints.parse_kafka_uuid(wanted_id) if wanted_id else None
        partition_log = self.logs.get_log(topic, index)
        if partition_log is not None and topic_id is not None and partition_log.topic_id not in (None, topic_id):
            log.warning("%s-%d: the local log belongs to an earlier topic of that name; deleting it", topic, index)
            self._delete_replica(topic, index, "(an earlier topic's)")
            partition_log = None
        if partition_log is None:
            try:
                partition_log = self.logs.get_or_create_log(topic, index, topic_id=topic_id)
            except OSError as exc:
                log.error("%s-%d: cannot create the local replica: %s", topic, index, exc)
                return None
        found = self.partitions.get((topic, index))
        if found is None or found.log is not partition_log:
            found = self.partitions[(topic, index)] = Partition(topic, index, partition_log, role=Role.OFFLINE,
                                                                leader_epoch=-1, trusted=self.trusted,
                                                                publisher=self.publisher)
        return found

    def _lead(self, partition: Partition, state: znodes.PartitionState, replicas: list[int]) -> None:
        if partition.role is Role.LEADER and partition.leader_epoch == state.leader_epoch:
            # same epoch: the ISR may have changed (the controller's writes)
            leadership = partition.leadership
            assert leadership is not None  # a leader's
            leadership.znode = state
            if sorted(leadership.state.isr) != sorted(state.isr):
                leadership.state.isr_applied(state.isr)
            self.advance(partition)
            return
        self._step_down(partition)
        partition_log = partition.log
        leader = LeaderState(self.broker_id, state.leader_epoch, partition_log.written_offset, list(state.isr),
                             list(replicas), partition_log.high_watermark, self.settings.lag_time_max_ms)
        leader.start_clock(self.clock.now_ms())
        partition.role, partition.leader_epoch, partition.leader_id = Role.LEADER, state.leader_epoch, self.broker_id
        partition.leadership = Leadership(leader, state)
        log.info("%s-%d: leading at epoch %d from offset %d (ISR %s)", partition.topic, partition.index,
                 state.leader_epoch, partition_log.written_offset, state.isr)
        self.on_leadership(partition.topic, partition.index, True)
        self.advance(partition)
        self.changed(partition)

    def _follow(self, partition: Partition, state: znodes.PartitionState, image: ClusterImage) -> None:
        if not (partition.role is Role.FOLLOWER
                and (partition.leader_id, partition.leader_epoch) == (state.leader, state.leader_epoch)):
            self._step_down(partition)
            partition.role = Role.FOLLOWER
            partition.leader_epoch, partition.leader_id = state.leader_epoch, state.leader
            self.changed(partition)
        leader = image.brokers.get(state.leader)
        if leader is None:
            return  # its leader is not registered (yet): the next image says where it is
        fetcher_key = (state.leader, leader.host, leader.port)
        for key, other in self.fetchers.items():
            if key != fetcher_key:
                other.unfollow(partition.topic, partition.index)  # its leader moved, or registered elsewhere
        fetcher = self.fetchers.get(fetcher_key)
        if fetcher is None:
            fetcher = self.fetchers[fetcher_key] = ReplicaFetcher(self.settings.fetcher, state.leader, leader.host,
                                                                  leader.port, broker_epoch=self.broker_epoch)
        topic_id = image.topics[partition.topic].topic_id
        # the same epoch and log again is a no-op for the fetcher: it keeps its place
        fetcher.follow(partition.topic, partition.index, state.leader_epoch, partition.log,
                       checkpoints.parse_kafka_uuid(topic_id) if topic_id else uuid.UUID(int=0))

    def _go_offline(self, partition: Partition, state: znodes.PartitionState | None) -> None:
        if partition.role is Role.OFFLINE:
            return
        self._step_down(partition)
        partition.role, partition.leader_id = Role.OFFLINE, NO_LEADER
        if state is not None:
            partition.leader_epoch = state.leader_epoch
        self.changed(partition)

    def _step_down(self, partition: Partition) -> None:
        """Whatever role it had ends: a leadership (its waiters are answered as they
        look again), or a fetcher's following."""
        if partition.role is Role.LEADER:
            partition.role, partition.leadership = Role.OFFLINE, None
            self.changed(partition)
            self.on_leadership(partition.topic, partition.index, False)
        elif partition.role is Role.FOLLOWER:
            partition.role = Role.OFFLINE
            for fetcher in self.fetchers.values():
                fetcher.unfollow(partition.topic, partition.index)

    def _close_idle_fetchers(self) -> None:
        for fetcher_key, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[fetcher_key]
                asyncio.get_running_loop().create_task(fetcher.close())

    def _delete_local(self, topic: str) -> None:
        for (name, index) in list(self.logs.logs()):
            if name == topic:
                self._delete_replica(name, index, "with its topic")

    def _delete_moved_away(self, image: ClusterImage) -> None:
        """A replica reassigned off this broker goes, as Kafka's StopReplica
        with delete.  Only for topics the image holds: their assignment comes
        whole from one znode, so a partial image at start cannot cause it."""
        for (topic, index) in list(self.logs.logs()):
            assignment = image.topics.get(topic)
            if (assignment is not None and index in assignment.partitions
                    and self.broker_id not in assignment.partitions[index]):
                self._delete_replica(topic, index, "after its reassignment to other brokers")

    def _delete_replica(self, topic: str, index: int, why: str) -> None:
        found = self.partitions.pop((topic, index), None)
        if found is not None:
            self._go_offline(found, None)
        self.publisher.withdraw(topic, index)
        self.logs.delete_log(topic, index)
        log.info("%s-%d: local replica deleted %s", topic, index, why)

    async def close(self) -> None:
        self.publisher.revoke_lease()
        for partition in list(self.partitions.values()):
            self._go_offline(partition, None)
        await asyncio.gather(*(f.close() for f in self.fetchers.values()), return_exceptions=True)
        self.fetchers.clear()
