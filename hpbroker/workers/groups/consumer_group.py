"""One consumer group of the consumer protocol (KIP-848, ConsumerGroupHeartbeat):
the coordinator assigns the partitions and each member reconciles towards its
target through its heartbeats, with no group-wide barrier.

Epochs.  The *group epoch* moves on every change of membership, subscriptions,
or the partitions of the subscribed topics; the *target assignment* (a
server-side assignor's, ``assignors.py``) is recomputed for it at once, so its
epoch is the group epoch.  A member's epoch is the target epoch it has
reached.  A member moves to a new target in steps (Kafka's
``CurrentAssignmentBuilder``):

* it keeps what stays its own and first gives up what goes elsewhere: while
  partitions are *pending revocation* it keeps its epoch (UNREVOKED), and its
  next heartbeat that no longer owns them moves it on;
* it gets a new partition only once nobody else holds it, assigned or pending
  revocation (``holders``): until then it is at the new epoch but UNRELEASED,
  and picks the partition up on a later heartbeat.

So no partition is ever owned by two members at once.  A member that does not
give up its partitions within its rebalance timeout, or stops heartbeating for
the session timeout, is removed and its partitions are free.  A static member
(an instance id) that leaves with epoch -2 keeps its partitions, parked, for
its next instance.

Fencing.  A heartbeat whose epoch is newer than the member's, or older except
for the member's previous epoch while it owns nothing outside its assignment
(the answer that moved it was lost), is FENCED_MEMBER_EPOCH: the client drops
its partitions and joins again with epoch 0.  Commits must carry the member's
epoch.

State is in memory only: after the coordinator restarts or moves, members are
unknown, get UNKNOWN_MEMBER_ID and join again (committed offsets are kept in
``__consumer_offsets`` as for every group).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2

from hpbroker.clock import SYSTEM, Clock, Timer
from hpbroker.errors import ErrorCode
from hpbroker.workers.groups import assignors
from hpbroker.workers.groups.state import DEAD, EMPTY, STABLE, GroupState
from hpbroker.workers.owner_calls import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeat,
    ConsumerHeartbeatResult,
    DescribedConsumer,
    GroupDescription,
    TopicPartitions,
)

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2  # what a heartbeat's epoch may also mean
PROTOCOL_TYPE = "consumer"

# Subscription regexes are RE2's, as Kafka's (RE2/J): the same dialect, and
# matching in linear time, so no pattern can stall the coordinator's loop.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the member's error, not a line on our stderr

Assignment = dict[uuid.UUID, set[int]]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED = "unrevoked_partitions"
    UNRELEASED = "unreleased_partitions"


@dataclass(frozen=True)
class TopicView:
    """What the coordinator knows of one topic when it assigns."""
    topic_id: uuid.UUID
    name: str
    partitions: int
    internal: bool = False  # never matched by a regex subscription


@dataclass
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    rebalance_ms: int
    instance_id: str | None = None
    rack_id: str | None = None
    topic_names: tuple[str, ...] = ()
    topic_regex: str | None = None
    pattern: Any = None  # topic_regex, compiled (re2's)
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    session: Timer | None = None
    revocation: Timer | None = None  # armed while it has partitions to give up

    def stop_timers(self) -> None:
        for timer in (self.session, self.revocation):
            if timer is not None:
                timer.cancel()
        self.session = self.revocation = None


def _copy(assignment: Mapping[uuid.UUID, set[int]]) -> Assignment:
    return {t: set(ps) for t, ps in assignment.items() if ps}


def _wire(assignment: Mapping[uuid.UUID, set[int]]) -> TopicPartitions:
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes) if ps]


def unknown_member(group_id: str, member_id: str) -> ConsumerHeartbeatResult:
    return ConsumerHeartbeatResult(ErrorCode.unknown_member_id, f"member {member_id!r} is not in group {group_id!r}")


def _owns_any(owned: Mapping[uuid.UUID, set[int]] | None, partitions: Mapping[uuid.UUID, set[int]]) -> bool:
    """Whether the member, by what it says it owns, still holds any of ``partitions``;
    it said nothing: assume it does."""
    if owned is None:
        return any(partitions.values())
    return any(owned.get(t, set()) & ps for t, ps in partitions.items())


class ConsumerGroup:
    protocol_type = PROTOCOL_TYPE

    def __init__(self, group_id: str, config: ConsumerGroupConfig, topics: Callable[[], Mapping[str, TopicView]],
                 clock: Clock = SYSTEM):
        self.group_id = group_id
        self.config = config
        self.topics = topics  # name -> TopicView of every topic now, read when the group may need it
        self.clock = clock
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        self.holders: dict[tuple[uuid.UUID, int], str] = {}  # partition -> member assigned it or revoking it
        self.static: dict[str, str] = {}  # group.instance.id -> its member
        self.subscribed: dict[str, TopicView] = {}  # the subscribed topics as last assigned
        self.assignor_name = assignors.DEFAULT
        self.state_timestamp = clock.now_ms()
        self.dead = False

    # --- what the coordinator reads ---------------------------------------------------
    @property
    def state(self) -> GroupState:
        """EMPTY, STABLE or DEAD, for the rules this group shares with classic ones
        (deletion, offset expiry and commits); ``state_name`` is Kafka's finer name."""
        if self.dead:
            return DEAD
        return STABLE if self.members else EMPTY

    @property
    def state_name(self) -> str:
        if self.dead:
            return "Dead"
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topics(self) -> set[str]:
        return set(self.subscribed)

    def commit_error(self, member_id: str, epoch: int, api_version: int, transactional: bool = False) -> ErrorCode:
        """May this member commit offsets at ``epoch``?  An empty group takes a
        commit from outside group management (no member, a negative epoch).
        A member of this protocol commits with OffsetCommit v9 or later, and
        at its own epoch (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION in a
        transaction, as TxnOffsetCommit has no other word for it)."""
        if not member_id and epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if epoch != member.epoch:
            return ErrorCode.illegal_generation if transactional else ErrorCode.stale_member_epoch
        return ErrorCode.none

    def check_member(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        """TxnOffsetCommit's check (KIP-447)."""
        return self.commit_error(member_id, generation, api_version=0, transactional=True)

    def touch(self, member_id: str) -> None:
        """Only heartbeats keep a member of this protocol alive."""

    def describe(self) -> GroupDescription:
        """DescribeGroups (the classic API) does not see it, as in Kafka: a
        tool reading classic member metadata would find none here."""
        return GroupDescription(ErrorCode.group_id_not_found, "Dead")

    def describe_consumers(self) -> ConsumerGroupDescription:
        names = {view.topic_id: view.name for view in self.topics().values()}

        def named(assignment: Mapping[uuid.UUID, set[int]]):
            return [(t, names.get(t, ""), ps) for t, ps in _wire(assignment)]

        members = [DescribedConsumer(m.member_id, m.instance_id, m.rack_id, m.epoch, m.client_id, m.client_host,
                                     list(m.topic_names), m.topic_regex, named(m.assigned),
                                     named(self.target.get(m.member_id, {})))
                   for m in self.members.values()]
        return ConsumerGroupDescription(ErrorCode.none, None, self.state_name, self.group_epoch,
                                        self.assignment_epoch, self.assignor_name, members)

    # --- the heartbeat -----------------------------------------------------------------
    def heartbeat(self, call: ConsumerGroupHeartbeat) -> ConsumerHeartbeatResult:
        if self.dead:
            return ConsumerHeartbeatResult(ErrorCode.coordinator_not_available)
        if call.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(call)
        if call.assignor is not None and call.assignor not in assignors.ASSIGNORS:
            return ConsumerHeartbeatResult(ErrorCode.unsupported_assignor,
                                           f"assignor {call.assignor!r} is not one of {sorted(assignors.ASSIGNORS)}")
        pattern = None
        if call.topic_regex:
            try:
                pattern = re2.compile(call.topic_regex, _RE2_OPTIONS)
            except re2.error as exc:
                why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
                return ConsumerHeartbeatResult(ErrorCode.invalid_regular_expression,
                                               f"subscribed topic regex {call.topic_regex!r}: {why}")
        member = self.members.get(call.member_id)
        joined = False
        if call.member_epoch == JOIN_EPOCH:
            found = self._join(call)
            if isinstance(found, ConsumerHeartbeatResult):
                return found
            member, joined = found
        else:
            if member is None:
                return unknown_member(self.group_id, call.member_id)
            error = self._fencing_error(member, call)
            if error is not None:
                return error
        owned = None if call.owned is None else {t: set(ps) for t, ps in call.owned}
        subscription_changed = self._update(member, call, pattern)
        if self._refresh_metadata() or subscription_changed or joined:
            self.group_epoch += 1  # one step for whatever this heartbeat changed
            self._assign()
        before = _copy(member.assigned)
        self._reconcile(member, owned)
        self._arm_session(member)
        full = call.rebalance_ms != -1 and call.owned is not None and (
            call.topic_names is not None or call.topic_regex is not None)  # the member's whole state
        send = call.member_epoch == JOIN_EPOCH or full or member.assigned != before
        return ConsumerHeartbeatResult(ErrorCode.none, None, member.member_id, member.epoch,
                                       self.config.heartbeat_ms, _wire(member.assigned) if send else None)

    def _join(self, call: ConsumerGroupHeartbeat) -> ConsumerHeartbeatResult | tuple[ConsumerMember, bool]:
        """The member an epoch-0 heartbeat makes, and whether the group changed
        with it: a static member back within its session timeout takes over
        what its last instance held, and nothing moves."""
        if call.instance_id is not None:
            holder = self.members.get(self.static.get(call.instance_id, ""))
            if holder is not None and holder.epoch == STATIC_LEAVE_EPOCH:
                return self._take_over(holder, call.instance_id, call), False
            if holder is not None and holder.member_id != call.member_id:
                return ConsumerHeartbeatResult(ErrorCode.unreleased_instance_id,
                                               f"instance {call.instance_id!r} is still member "
                                               f"{holder.member_id!r} of group {self.group_id!r}")
        member = self.members.get(call.member_id)
        if member is not None:  # joins again (after being fenced): what it held is given up
            self._drop(member)
        elif len(self.members) >= self.config.max_size:
            return ConsumerHeartbeatResult(ErrorCode.group_max_size_reached,
                                           f"group {self.group_id!r} has {len(self.members)} members already")
        member = ConsumerMember(call.member_id, call.client_id, call.client_host, call.rebalance_ms,
                                instance_id=call.instance_id)
        self.members[member.member_id] = member
        if call.instance_id is not None:
            self.static[call.instance_id] = member.member_id
        return member, True

    def _take_over(self, old: ConsumerMember, instance_id: str, call: ConsumerGroupHeartbeat) -> ConsumerMember:
        other = self.members.get(call.member_id)
        if other is not None and other is not old:
            self._drop(other)  # its id comes back as this instance: what it held is given up
        old.stop_timers()
        new = ConsumerMember(call.member_id, call.client_id, call.client_host, call.rebalance_ms,
                             instance_id=instance_id, rack_id=old.rack_id, topic_names=old.topic_names,
                             topic_regex=old.topic_regex, pattern=old.pattern, assignor=old.assignor)
        del self.members[old.member_id]
        self.members[new.member_id] = new
        self.static[instance_id] = new.member_id
        if old.member_id in self.target:
            self.target[new.member_id] = self.target.pop(old.member_id)
        self._release(old)
        self._set_assignment(new, old.assigned, {})
        return new

    def _fencing_error(self, member: ConsumerMember, call: ConsumerGroupHeartbeat) -> ConsumerHeartbeatResult | None:
        epoch = call.member_epoch
        if epoch == member.epoch:
            return None
        if epoch < member.epoch and epoch == member.previous_epoch and call.owned is not None and all(
                set(ps) <= member.assigned.get(t, set()) for t, ps in call.owned):
            return None  # it missed the answer that moved it on, and owns nothing it should not
        return ConsumerHeartbeatResult(ErrorCode.fenced_member_epoch,
                                       f"member {member.member_id!r} of group {self.group_id!r} is at epoch "
                                       f"{member.epoch}, not {epoch}")

    def _update(self, member: ConsumerMember, call: ConsumerGroupHeartbeat, pattern: Any) -> bool:
        """Take what the heartbeat changed; True when the subscription did."""
        member.client_id, member.client_host = call.client_id, call.client_host
        if call.rebalance_ms > 0:
            member.rebalance_ms = call.rebalance_ms
        if call.rack_id is not None:
            member.rack_id = call.rack_id
        changed = False
        if call.topic_names is not None and tuple(sorted(call.topic_names)) != member.topic_names:
            member.topic_names = tuple(sorted(call.topic_names))
            changed = True
        if call.topic_regex is not None and (call.topic_regex or None) != member.topic_regex:
            member.topic_regex, member.pattern = call.topic_regex or None, pattern
            changed = True
        if call.assignor is not None and call.assignor != member.assignor:
            member.assignor = call.assignor
            changed = True
        return changed

    def _member_topics(self, member: ConsumerMember, topics: Mapping[str, TopicView]) -> set[str]:
        names = {n for n in member.topic_names if n in topics}
        pattern = member.pattern
        if pattern is not None:
            names |= {n for n, view in topics.items() if not view.internal and pattern.fullmatch(n)}
        return names

    def _refresh_metadata(self) -> bool:
        """The subscribed topics as they are now; True when that differs from what
        the target was computed for (a topic created or deleted, partitions added)."""
        topics = self.topics()
        wanted: set[str] = set()
        for member in self.members.values():
            wanted |= self._member_topics(member, topics)
        now = {n: topics[n] for n in sorted(wanted)}
        if now == self.subscribed:
            return False
        self.subscribed = now
        return True

    def _assign(self) -> None:
        """A new target assignment for the group epoch, by the assignor the members ask for."""
        chosen = [m.assignor for m in self.members.values() if m.assignor]
        self.assignor_name = max(sorted(set(chosen)), key=chosen.count) if chosen else assignors.DEFAULT
        topics = self.subscribed
        subscriptions = {m.member_id: {topics[n].topic_id for n in self._member_topics(m, topics)}
                         for m in self.members.values()}
        partitions = {view.topic_id: view.partitions for view in topics.values()}
        self.target = assignors.ASSIGNORS[self.assignor_name](subscriptions, partitions, self.target)
        self.assignment_epoch = self.group_epoch

    # --- reconciling one member towards its target ----------------------------------------
    def _reconcile(self, member: ConsumerMember, owned: Assignment | None) -> None:
        if member.state == MemberState.UNREVOKED:
            if _owns_any(owned, member.revoking):
                return  # still giving them up
            self._set_assignment(member, member.assigned, {})  # given up: free for their next owners
        elif member.state == MemberState.STABLE and member.epoch == self.assignment_epoch:
            return
        target = self.target.get(member.member_id, {})
        kept: Assignment = {}
        revoking: Assignment = {}
        new: Assignment = {}
        unreleased = False
        for topic_id in set(target) | set(member.assigned):
            current, wanted = member.assigned.get(topic_id, set()), target.get(topic_id, set())
            if current & wanted:
                kept[topic_id] = current & wanted
            if current - wanted:
                revoking[topic_id] = current - wanted
            free = {p for p in wanted - current
                    if self.holders.get((topic_id, p), member.member_id) == member.member_id}
            if free:
                new[topic_id] = free
            unreleased |= len(free) < len(wanted - current)
        if revoking and _owns_any(owned, revoking):
            member.state = MemberState.UNREVOKED  # its epoch stays until it has given them up
            self._set_assignment(member, kept, revoking)
            self._cancel_revocation(member)  # each revocation has the whole rebalance timeout
            self._arm_revocation(member)
            return
        member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        for topic_id, ps in new.items():
            kept.setdefault(topic_id, set()).update(ps)
        member.state = MemberState.UNRELEASED if unreleased else MemberState.STABLE
        self._set_assignment(member, kept, {})
        self._cancel_revocation(member)

    def _set_assignment(self, member: ConsumerMember, assigned: Assignment, revoking: Assignment) -> None:
        self._release(member)
        member.assigned, member.revoking = _copy(assigned), _copy(revoking)
        for assignment in (member.assigned, member.revoking):
            for topic_id, ps in assignment.items():
                for p in ps:
                    self.holders[(topic_id, p)] = member.member_id

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.revoking):
            for topic_id, ps in assignment.items():
                for p in ps:
                    if self.holders.get((topic_id, p)) == member.member_id:
                        del self.holders[(topic_id, p)]

    # --- leaving, timeouts -----------------------------------------------------------------
    def _leave(self, call: ConsumerGroupHeartbeat) -> ConsumerHeartbeatResult:
        """-1 leaves for good; -2 is a static member going away for a while (a
        restart): it keeps its partitions, parked, until an instance of the
        same id takes them over or its session times out."""
        member = self.members.get(call.member_id)
        if call.instance_id is not None:
            holder = self.static.get(call.instance_id)
            if holder is None:
                return ConsumerHeartbeatResult(ErrorCode.unknown_member_id,
                                               f"instance {call.instance_id!r} is not in group {self.group_id!r}")
            if holder != call.member_id:
                return ConsumerHeartbeatResult(ErrorCode.fenced_instance_id,
                                               f"instance {call.instance_id!r} is member {holder!r} now")
        if member is None:
            return unknown_member(self.group_id, call.member_id)
        if call.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            self._set_assignment(member, member.assigned, {})
            member.epoch, member.state = STATIC_LEAVE_EPOCH, MemberState.STABLE
            self._cancel_revocation(member)
            self._arm_session(member)
        else:
            self._remove(member)
        return ConsumerHeartbeatResult(ErrorCode.none, None, member.member_id, call.member_epoch,
                                       self.config.heartbeat_ms)

    def _drop(self, member: ConsumerMember) -> None:
        """Forget the member and free its partitions (it may join again at once)."""
        member.stop_timers()
        self._release(member)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]

    def _remove(self, member: ConsumerMember) -> None:
        self._drop(member)
        self.group_epoch += 1
        if self.members:
            self._refresh_metadata()
            self._assign()
        else:
            self.subscribed, self.target = {}, {}
            self.assignment_epoch = self.group_epoch
            self.state_timestamp = self.clock.now_ms()

    def _arm_session(self, member: ConsumerMember) -> None:
        if member.session is not None:
            member.session.cancel()
        member.session = self.clock.call_later(self.config.session_ms, self._session_expired, member.member_id)

    def _arm_revocation(self, member: ConsumerMember) -> None:
        member.revocation = self.clock.call_later(member.rebalance_ms, self._revocation_expired,
                                                  member.member_id, member.epoch)

    def _cancel_revocation(self, member: ConsumerMember) -> None:
        if member.revocation is not None:
            member.revocation.cancel()
            member.revocation = None

    def _session_expired(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is not None and not self.dead:
            self._remove(member)

    def _revocation_expired(self, member_id: str, epoch: int) -> None:
        """It kept partitions it was told to give up past its rebalance timeout."""
        member = self.members.get(member_id)
        if member is not None and not self.dead and member.state == MemberState.UNREVOKED and member.epoch == epoch:
            self._remove(member)

    def close(self, state: GroupState = DEAD) -> None:
        for member in self.members.values():
            member.stop_timers()
        self.dead = True
