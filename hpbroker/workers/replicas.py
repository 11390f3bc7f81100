"""A worker's replicas in cluster mode: which partitions it leads and which it
follows, taken from the cluster image, and what each role does.

For every partition assigned to this broker and owned by this worker (the
single writer):

* leader: a ``LeaderState`` tracks the followers' fetches; the high watermark
  is the least log end over the ISR; the ISR is shrunk or grown by a
  version-checked write of the partition's state znode; acks=all producers
  wait here until the high watermark passes their batch;
* follower: a ``ReplicaFetcher`` per leader broker copies the leader's log,
  truncating first by leader epoch;
* neither (no leader elected): nothing is served.

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
import time
import uuid
from dataclasses import dataclass

from hpbroker.clock import now_ms
from hpbroker.errors import ErrorCode
from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.worker_link import Session
from hpbroker.replication.fetcher import FetcherSettings, ReplicaFetcher
from hpbroker.replication.isr import LeaderState
from hpbroker.server.ownership import partition_owner
from hpbroker.storage import checkpoints

log = logging.getLogger(__name__)

NO_LEADER = -1
TICK_S = 0.1  # how often the worker ticks
STALL_S = 1.0  # a tick this late means the loop stalled: the time in between went unmeasured
SETTLE_MAX_S = 10.0  # how long a request waits out a leadership in doubt


@dataclass(frozen=True)
class ReplicaSettings:
    broker_id: int
    fetcher: FetcherSettings
    lag_time_max_ms: int = 30000  # replica.lag.time.max.ms
    session_timeout_ms: int = 18000  # zookeeper.session.timeout.ms


@dataclass
class Leadership:
    state: LeaderState
    znode: znodes.PartitionState  # as last read or written: the base of our next ISR write
    proposing: bool = False


class ReplicaManager:
    def __init__(self, settings: ReplicaSettings, index: int, workers: int, logs, link, *,
                 wake=lambda topic, partition: None, on_leadership=lambda topic, partition, leading: None,
                 current_image=None):
        self.settings = settings
        self.broker_id = settings.broker_id
        self.index = index
        self.workers = workers
        self.logs = logs
        self.link = link  # WorkerLink: propose_isr
        self.current_image = current_image or link.image  # the image roles are taken from
        self.wake = wake  # long polls and acks waiters of a partition look again
        self.on_leadership = on_leadership
        self.image = ClusterImage()
        self.leaders: dict[tuple[str, int], Leadership] = {}
        self.following: dict[tuple[str, int], tuple[int, int]] = {}  # -> (leader id, leader epoch)
        self.fetchers: dict[tuple[int, str, int], ReplicaFetcher] = {}
        self._acks: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = {}
        self.session = Session.CONNECTED  # as the link last said
        self.suspect = False  # a pause was seen: wait for the session to be confirmed
        self._last_tick = time.monotonic()
        self._doubt_since: float | None = None  # when the leaderships went into doubt
        self._settled = asyncio.Event()
        self._settled.set()
        self._known_topics: set[str] = set()

    # --- questions from the partition service ---------------------------------------------
    def leads(self, topic: str, partition: int) -> bool:
        """This broker leads the partition now and may act on it."""
        return (topic, partition) in self.leaders and self._trusted()

    def fenced(self, topic: str, partition: int) -> bool:
        """The image makes this broker the partition's leader, but it may not act
        as one for now: its session expired and is being replaced, or a pause
        was noticed and the states are being read again.  A wait, not a move."""
        return (topic, partition) in self.leaders and not self._trusted()

    def leader_epoch(self, topic: str, partition: int) -> int:
        found = self.leaders.get((topic, partition))
        if found is not None:
            return found.state.leader_epoch
        state = self.image.states.get((topic, partition))
        return state.leader_epoch if state is not None else -1

    def isr_size(self, topic: str, partition: int) -> int:
        found = self.leaders.get((topic, partition))
        return len(found.state.isr) if found is not None else 0

    async def settled(self, timeout_s: float | None = None) -> None:
        """Return once the leaderships are not in doubt (or after ``timeout_s``,
        by default the session timeout capped at ``SETTLE_MAX_S``)."""
        if self._trusted():
            return
        if timeout_s is None:
            timeout_s = min(SETTLE_MAX_S, self.settings.session_timeout_ms / 1000)
        try:
            await asyncio.wait_for(self._settled.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass  # still in doubt: the caller answers as a broker that does not lead

    def _trusted(self) -> bool:
        return self.session is not Session.EXPIRED and not self.suspect and not self._noticed_pause()

    def _noticed_pause(self) -> bool:
        """True, and leaderships fenced until the session is confirmed, when the
        last tick is more than half a session timeout ago: the session may have
        expired meanwhile without this worker hearing of it."""
        if (time.monotonic() - self._last_tick) * 1000 > self.settings.session_timeout_ms / 2:
            self._suspect_pause()
            return True
        return False

    def _doubt_begins(self, since: float) -> None:
        if self._doubt_since is None:
            self._doubt_since = since
            self._settled.clear()

    def _doubt_may_end(self) -> None:
        """Leaving doubt: the time it lasted counts for no follower's lag."""
        if self._doubt_since is None or not self._trusted():
            return
        self._skip_unmeasured(time.monotonic() - self._doubt_since)
        self._doubt_since = None
        self._settled.set()

    def _skip_unmeasured(self, seconds: float) -> None:
        now = now_ms()
        for found in self.leaders.values():
            found.state.skip_time(int(seconds * 1000), now)

    def _registered(self) -> dict[int, int]:
        """Broker id -> broker epoch of every registered broker, as the image has them."""
        return {broker_id: registration.epoch for broker_id, registration in self.image.brokers.items()}

    def broker_epoch(self) -> int:
        """This broker's own epoch (its registration's zxid); -1 while not registered."""
        registration = self.image.brokers.get(self.broker_id)
        return registration.epoch if registration is not None else -1

    # --- the leader's side ----------------------------------------------------------------------
    def follower_fetched(self, topic: str, partition: int, replica: int, fetch_offset: int,
                         broker_epoch: int = -1) -> None:
        """A follower (the incarnation ``broker_epoch``) fetched from ``fetch_offset``:
        it holds everything below it."""
        found = self.leaders.get((topic, partition))
        partition_log = self.logs.get_log(topic, partition)
        if found is None or partition_log is None:
            return
        found.state.follower_fetched(replica, fetch_offset, partition_log.written_offset, now_ms(), broker_epoch)
        self._maybe_expand(topic, partition, found)
        self.advance(topic, partition)

    def advance(self, topic: str, partition: int) -> None:
        """Move the high watermark as far as the ISR allows (after an append or a fetch)."""
        found = self.leaders.get((topic, partition))
        partition_log = self.logs.get_log(topic, partition)
        if found is None or partition_log is None or not self._trusted():
            return
        if found.state.advance_high_watermark(partition_log.written_offset):
            partition_log.high_watermark = found.state.high_watermark
            self._settle_acks(topic, partition)
            self.wake(topic, partition)

    async def wait_replicated(self, topic: str, partition: int, end_offset: int, min_insync: int,
                              timeout_s: float) -> ErrorCode:
        """acks=all: once the high watermark reaches ``end_offset``.  Kafka's
        answers: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR had shrunk below
        ``min_insync`` by then, NOT_LEADER_OR_FOLLOWER when leadership went,
        REQUEST_TIMED_OUT when time ran out."""
        key = (topic, partition)
        if key not in self.leaders:
            return ErrorCode.not_leader_or_follower
        partition_log = self.logs.get_log(topic, partition)
        if partition_log is None or partition_log.high_watermark < end_offset:
            future = asyncio.get_running_loop().create_future()
            self._acks.setdefault(key, []).append((end_offset, future))
            try:
                reached = await asyncio.wait_for(future, timeout_s)
            except asyncio.TimeoutError:
                return ErrorCode.request_timed_out
            finally:
                waiting = self._acks.get(key)
                if waiting is not None:
                    self._acks[key] = [w for w in waiting if w[1] is not future]
            if not reached:
                return ErrorCode.not_leader_or_follower
        found = self.leaders.get(key)
        if found is None:
            return ErrorCode.not_leader_or_follower
        if len(found.state.isr) < min_insync:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def _settle_acks(self, topic: str, partition: int, *, lost: bool = False) -> None:
        waiting = self._acks.get((topic, partition))
        if not waiting:
            return
        partition_log = self.logs.get_log(topic, partition)
        hw = partition_log.high_watermark if partition_log is not None else -1
        keep = []
        for end_offset, future in waiting:
            if future.done():
                continue
            if lost:
                future.set_result(False)
            elif hw >= end_offset:
                future.set_result(True)
            else:
                keep.append((end_offset, future))
        self._acks[(topic, partition)] = keep

    def wanted_isr(self, topic: str, partition: int) -> list[int] | None:
        """The ISR this broker, as the partition's leader, would propose now; None
        when the current one is right (or it does not lead the partition)."""
        found = self.leaders.get((topic, partition))
        partition_log = self.logs.get_log(topic, partition)
        if found is None or partition_log is None:
            return None
        return found.state.isr_change(partition_log.written_offset, now_ms(), self._registered(), found.znode.zxid)

    def _maybe_expand(self, topic, partition, found: Leadership) -> None:
        wanted = self.wanted_isr(topic, partition)
        if wanted is not None and len(wanted) > len(found.state.isr):
            self._propose(topic, partition, found, wanted)

    def _propose(self, topic: str, partition: int, found: Leadership, isr: list[int]) -> None:
        # a replica whose broker is not registered, or is in a controlled shutdown,
        # cannot join (as Kafka's KIP-841): the controller would take it out
        # again, and the two writers would fight
        isr = [r for r in isr if r == self.broker_id or (r in self.image.brokers and r not in self.image.shutting_down)]
        if (found.proposing or sorted(isr) == sorted(found.state.isr) or not self._trusted()
                or self.session is not Session.CONNECTED):
            return  # (without a connection the write cannot be made: the ISR stays as it is meanwhile)
        found.proposing = True
        base = found.znode
        proposed = znodes.PartitionState(self.broker_id, found.state.leader_epoch, isr, base.controller_epoch,
                                         base.zk_version)
        asyncio.get_running_loop().create_task(self._write_isr(topic, partition, found, proposed))

    async def _write_isr(self, topic: str, partition: int, found: Leadership, proposed: znodes.PartitionState) -> None:
        before = list(found.state.isr)  # for the log line: an image may apply the change while we wait
        try:
            written = await self.link.propose_isr(topic, partition, proposed)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next tick proposes again
            log.warning("%s-%d: could not write the ISR %s: %r", topic, partition, proposed.isr, exc)
            written = None
        finally:
            found.proposing = False
        if written is None or self.leaders.get((topic, partition)) is not found:
            return  # the state changed under us: the image brings the truth
        log.info("%s-%d: ISR %s -> %s", topic, partition, before, proposed.isr)
        found.znode = written
        found.state.isr_applied(written.isr)
        self.advance(topic, partition)

    def tick(self) -> None:
        """Every ~100 ms: notice a pause, shrink the ISR of followers that fell behind."""
        now = time.monotonic()
        late = now - self._last_tick
        paused = self._noticed_pause()  # the doubt it starts covers the time lost
        self._last_tick = now
        if not paused and late > STALL_S:
            self._skip_unmeasured(late - TICK_S)  # a stalled loop saw no fetch meanwhile
        if not self._trusted():
            return
        for (topic, partition), found in list(self.leaders.items()):
            wanted = self.wanted_isr(topic, partition)
            if wanted is not None:
                self._propose(topic, partition, found, wanted)
            else:
                self.advance(topic, partition)

    def _suspect_pause(self) -> None:
        if self.suspect:
            return
        self.suspect = True
        self._doubt_begins(self._last_tick)
        log.warning("this worker was paused for longer than half the ZooKeeper session timeout: leaderships "
                    "in doubt until the session is confirmed")
        asyncio.get_running_loop().create_task(self._confirm_session())

    async def _confirm_session(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(None, self.link.watcher.reread_states)
                break
            except Exception as exc:  # noqa: BLE001 - retried until ZooKeeper answers
                log.warning("confirming the ZooKeeper session failed: %r", exc)
                await asyncio.sleep(0.5)
        self._last_tick = time.monotonic()
        self.suspect = False
        self.apply(self.current_image())
        self._doubt_may_end()

    # --- the session, as the link reports it -------------------------------------------------------
    def set_session(self, session: Session) -> None:
        """The link's news; the caller applies the image read with it next (before
        any request waiting out a doubt runs again)."""
        self.session = session
        if session is Session.EXPIRED:
            self._doubt_begins(time.monotonic())
        elif session is Session.CONNECTED:
            self._doubt_may_end()

    # --- roles from the image -------------------------------------------------------------------------
    def apply(self, image: ClusterImage) -> None:
        """Take every role the image gives this worker; drop the others."""
        self.image = image
        gone = self._known_topics - set(image.topics)
        self._known_topics = set(image.topics) - set(image.topics_being_deleted)
        wanted_leader, wanted_follower = {}, {}
        for topic, partition, replicas, state in image.partitions():
            if (self.broker_id not in replicas or topic in image.topics_being_deleted
                    or partition_owner(topic, partition, self.workers) != self.index):
                continue
            partition_log = self._local_log(image, topic, partition)
            if partition_log is None or state is None or state.leader == NO_LEADER:
                continue
            if state.leader == self.broker_id:
                wanted_leader[(topic, partition)] = (state, replicas)
            else:
                wanted_follower[(topic, partition)] = state
        for key in list(self.leaders):
            if key not in wanted_leader or wanted_leader[key][0].leader_epoch != self.leaders[key].state.leader_epoch:
                self._resign(*key)
        for key, (state, replicas) in wanted_leader.items():
            self._lead(*key, state, replicas)
        for key in list(self.following):
            if self.following[key] != _followed(wanted_follower.get(key)):
                self._unfollow(*key)
        for key, state in wanted_follower.items():
            self._follow(*key, state, image)
        for topic in sorted(gone | image.topics_being_deleted):
            self._delete_local(topic)
        self._delete_moved_away(image)
        self._close_idle_fetchers()

    def _local_log(self, image: ClusterImage, topic: str, partition: int):
        """The partition's log here, created empty on first assignment; a leftover
        of an earlier topic of the same name (another id) is replaced."""
        wanted_id = image.topics[topic].topic_id
        topic_id = checkpoints.parse_kafka_uuid(wanted_id) if wanted_id else None
        partition_log = self.logs.get_log(topic, partition)
        if partition_log is not None and topic_id is not None and partition_log.topic_id not in (None, topic_id):
            log.warning("%s-%d: the local log belongs to an earlier topic of that name; deleting it",
                        topic, partition)
            self.logs.delete_log(topic, partition)
            partition_log = None
        if partition_log is None:
            try:
                partition_log = self.logs.get_or_create_log(topic, partition, topic_id=topic_id)
            except OSError as exc:
                log.error("%s-%d: cannot create the local replica: %s", topic, partition, exc)
                return None
        return partition_log

    def _lead(self, topic: str, partition: int, state: znodes.PartitionState, replicas: list[int]) -> None:
        key = (topic, partition)
        found = self.leaders.get(key)
        if found is not None:  # same epoch: the ISR or replicas may have changed (the controller's writes)
            found.znode = state
            if sorted(found.state.isr) != sorted(state.isr):
                found.state.isr_applied(state.isr)
            self.advance(topic, partition)
            return
        self._unfollow(topic, partition)
        partition_log = self.logs.get_log(topic, partition)
        leader = LeaderState(self.broker_id, state.leader_epoch, partition_log.written_offset, list(state.isr),
                             list(replicas), partition_log.high_watermark, self.settings.lag_time_max_ms)
        leader.start_clock(now_ms())
        self.leaders[key] = Leadership(leader, state)
        log.info("%s-%d: leading at epoch %d from offset %d (ISR %s)", topic, partition, state.leader_epoch,
                 partition_log.written_offset, state.isr)
        self.on_leadership(topic, partition, True)
        self.advance(topic, partition)

    def _resign(self, topic: str, partition: int) -> None:
        self.leaders.pop((topic, partition), None)
        self._settle_acks(topic, partition, lost=True)
        self.wake(topic, partition)
        self.on_leadership(topic, partition, False)

    def _follow(self, topic: str, partition: int, state: znodes.PartitionState, image: ClusterImage) -> None:
        leader = image.brokers.get(state.leader)
        if leader is None:
            return  # its leader is not registered (yet): the next image says where it is
        key = (topic, partition)
        fetcher_key = (state.leader, leader.host, leader.port)
        fetcher = self.fetchers.get(fetcher_key)
        if fetcher is None:
            fetcher = self.fetchers[fetcher_key] = ReplicaFetcher(self.settings.fetcher, state.leader, leader.host,
                                                                  leader.port, broker_epoch=self.broker_epoch)
        self.following[key] = (state.leader, state.leader_epoch)
        topic_id = image.topics[topic].topic_id
        fetcher.follow(topic, partition, state.leader_epoch, self.logs.get_log(topic, partition),
                       checkpoints.parse_kafka_uuid(topic_id) if topic_id else uuid.UUID(int=0))

    def _unfollow(self, topic: str, partition: int) -> None:
        if self.following.pop((topic, partition), None) is None:
            return
        for fetcher in self.fetchers.values():
            fetcher.unfollow(topic, partition)

    def _close_idle_fetchers(self) -> None:
        for fetcher_key, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[fetcher_key]
                asyncio.get_running_loop().create_task(fetcher.close())

    def _delete_local(self, topic: str) -> None:
        for (name, partition) in list(self.logs.logs()):
            if name == topic:
                self._delete_replica(name, partition, "with its topic")

    def _delete_moved_away(self, image: ClusterImage) -> None:
        """A replica reassigned off this broker goes, as Kafka's StopReplica
        with delete.  Only for topics the image holds: their assignment comes
        whole from one znode, so a partial image at start cannot cause it."""
        for (topic, partition) in list(self.logs.logs()):
            assignment = image.topics.get(topic)
            if (assignment is not None and partition in assignment.partitions
                    and self.broker_id not in assignment.partitions[partition]):
                self._delete_replica(topic, partition, "after its reassignment to other brokers")

    def _delete_replica(self, topic: str, partition: int, why: str) -> None:
        if (topic, partition) in self.leaders:
            self._resign(topic, partition)
        self._unfollow(topic, partition)
        self.logs.delete_log(topic, partition)
        self.wake(topic, partition)
        log.info("%s-%d: local replica deleted %s", topic, partition, why)

    async def close(self) -> None:
        for key in list(self.leaders):
            self._resign(*key)
        await asyncio.gather(*(f.close() for f in self.fetchers.values()), return_exceptions=True)
        self.fetchers.clear()
        self.following.clear()


def _followed(state: znodes.PartitionState | None) -> tuple[int, int] | None:
    return None if state is None else (state.leader, state.leader_epoch)
