"""One classic consumer group's membership state machine, as Kafka's
``GroupCoordinator``/``GroupMetadata`` run it (KIP-345 static members,
KIP-394 MEMBER_ID_REQUIRED, KIP-134 initial rebalance delay)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join with new protocols, leave, session expiry--> PreparingRebalance
    PreparingRebalance --nobody rejoined--> Empty          any --delete/expiry--> Dead

Join and sync waits are futures resolved by the transitions; session,
rebalance and pending-sync timeouts are timers of the group's clock, re-armed
by heartbeats.  The clock is a parameter (``hpbroker.clock``; live: wall time
and the running loop's ``call_later``) so that tests move time by hand instead
of sleeping through timeouts.  Answers are the owner-call results
(``owner_calls.JoinResult``, ``SyncResult``, ``GroupDescription``), so they
cross the intra-broker channel as they are.  ``persist(group)`` is called
where Kafka writes the group's metadata record (assignment done, group
emptied, static member replaced) and returns an error code (0 when written).
A state change outside Kafka's transitions (above) is a bug: it raises.
"""

from __future__ import annotations

import asyncio
import enum
import struct
import uuid
from dataclasses import dataclass

from hpbroker.clock import SYSTEM, Clock, Timer
from hpbroker.errors import ErrorCode
from hpbroker.workers.owner_calls import DescribedMember, GroupDescription, JoinedMember, JoinResult, SyncResult


class GroupState(enum.Enum):
    """Kafka's names, as DescribeGroups and ListGroups show them."""
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (GroupState.EMPTY, GroupState.PREPARING, GroupState.COMPLETING,
                                              GroupState.STABLE, GroupState.DEAD)
# Kafka's GroupMetadata: the states each may be entered from.
_ENTERED_FROM = {
    PREPARING: {STABLE, COMPLETING, EMPTY},
    COMPLETING: {PREPARING},
    STABLE: {COMPLETING},
    EMPTY: {PREPARING},
    DEAD: set(GroupState),
}


class IllegalGroupTransition(RuntimeError):
    """A state change Kafka's state machine does not have: a bug."""



@dataclass(frozen=True)
class GroupConfig:
    min_session_ms: int = 6000
    max_session_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000


class Member:
    def __init__(self, member_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocols):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.protocols = list(protocols)  # [(name, metadata bytes)] in the member's preference order
        self.assignment = b""
        self.join_waiter: asyncio.Future | None = None
        self.sync_waiter: asyncio.Future | None = None
        self.expiry: Timer | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")

    def names(self) -> list[str]:
        return [n for n, _ in self.protocols]

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()


def _resolve(future: asyncio.Future | None, value) -> None:
    if future is not None and not future.done():
        future.set_result(value)


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (int16 version, [string]), or None if unreadable."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            topics.add(bytes(metadata[pos + 2:pos + 2 + n]).decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class Group:
    def __init__(self, group_id: str, config: GroupConfig, persist=lambda group: 0, clock: Clock = SYSTEM):
        self.group_id = group_id
        self.config = config
        self.persist = persist
        self.clock = clock
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self.pending: dict[str, Timer] = {}  # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()
        self.state_timestamp = clock.now_ms()
        self._join_timer: Timer | None = None
        self._sync_timer: Timer | None = None
        self._initial_delay = False  # the join phase waits out group.initial.rebalance.delay.ms
        self._new_member_added = False

    # --- helpers ---------------------------------------------------------------------
    def _set_state(self, state: GroupState) -> None:
        if self.state not in _ENTERED_FROM[state]:
            raise IllegalGroupTransition(f"group {self.group_id!r}: {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp = self.clock.now_ms()

    def _fenced(self, member_id: str, instance_id: str | None) -> bool:
        return instance_id is not None and self.static.get(instance_id, member_id) != member_id

    def _candidates(self, extra: list[str] | None = None) -> set[str]:
        sets = [set(m.names()) for m in self.members.values()]
        if extra is not None:
            sets.append(set(extra))
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The protocol all members support that most members list first among those."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n in m.names() if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = next(iter(self.members.values())).names()  # ties: the first member's preference
        return max(votes, key=lambda n: (votes[n], -order.index(n)))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer groups); None when unknown."""
        if self.protocol_type != "consumer" or not self.members:
            return set() if not self.members else None
        topics: set[str] = set()
        for m in self.members.values():
            found = subscribed_topics(m.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def _join_answer(self, member: Member, error=ErrorCode.none) -> JoinResult:
        members = []
        if member.member_id == self.leader:
            members = [JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
                       for m in self.members.values()]
        return JoinResult(error, self.generation, self.protocol_type, self.protocol_name, self.leader or "",
                          member.member_id, members)

    @staticmethod
    def join_error(error, member_id: str = "") -> JoinResult:
        return JoinResult(error, member_id=member_id)

    def _arm_expiry(self, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = self.clock.call_later(member.session_ms, self._on_expiry, member.member_id)

    # --- JoinGroup -------------------------------------------------------------------
    async def join(self, member_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
                   protocol_type, protocols, require_known_member_id) -> JoinResult:
        if self.state == DEAD:
            return self.join_error(ErrorCode.coordinator_not_available, member_id)
        names = [n for n, _ in protocols]
        if not protocol_type or not names or (self.members and (
                protocol_type != self.protocol_type or not self._candidates(names))):
            return self.join_error(ErrorCode.inconsistent_group_protocol, member_id)
        args = (instance_id, client_id, client_host, session_ms, rebalance_ms, protocols)
        if member_id == "":
            new_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is not None:
                old = self.static.get(instance_id)
                if old is not None and old in self.members:
                    return await self._replace_static(self.members[old], new_id, *args)
                return await self._add_and_rebalance(new_id, protocol_type, *args)
            if require_known_member_id:
                self.pending[new_id] = self.clock.call_later(session_ms, self._on_pending_expiry, new_id)
                return self.join_error(ErrorCode.member_id_required, new_id)
            return await self._add_and_rebalance(new_id, protocol_type, *args)
        if member_id in self.pending:
            self.pending.pop(member_id).cancel()
            return await self._add_and_rebalance(member_id, protocol_type, *args)
        if self._fenced(member_id, instance_id):
            return self.join_error(ErrorCode.fenced_instance_id, member_id)
        member = self.members.get(member_id)
        if member is None or self.state == EMPTY:
            return self.join_error(ErrorCode.unknown_member_id, member_id)
        same = member.protocols == list(protocols)
        if self.state == COMPLETING and same:
            return self._join_answer(member)  # a retried join: same answer again
        if self.state == STABLE and same and member_id != self.leader:
            return self._join_answer(member)  # nothing changed: no rebalance for a follower
        return await self._update_and_rebalance(member, session_ms, rebalance_ms, protocols)

    async def _add_and_rebalance(self, member_id, protocol_type, instance_id, client_id, client_host,
                                 session_ms, rebalance_ms, protocols) -> JoinResult:
        member = Member(member_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocols)
        if not self.members:
            self.protocol_type = protocol_type
        if instance_id is not None:
            self.static[instance_id] = member_id
        self.members[member_id] = member
        if self.leader is None:
            self.leader = member_id
        member.join_waiter = asyncio.get_running_loop().create_future()
        self._new_member_added = True
        self._maybe_prepare_rebalance()
        self._check_join_done()
        return await member.join_waiter

    async def _update_and_rebalance(self, member, session_ms, rebalance_ms, protocols) -> JoinResult:
        member.session_ms, member.rebalance_ms, member.protocols = session_ms, rebalance_ms, list(protocols)
        if member.join_waiter is None or member.join_waiter.done():
            member.join_waiter = asyncio.get_running_loop().create_future()
        waiter = member.join_waiter
        self._maybe_prepare_rebalance()
        self._check_join_done()
        return await waiter

    async def _replace_static(self, old: Member, new_id, instance_id, client_id, client_host, session_ms,
                              rebalance_ms, protocols) -> JoinResult:
        """A static member came back with a new member id: the old id is fenced, the
        new one takes its place (and its assignment)."""
        if old.expiry is not None:
            old.expiry.cancel()
        _resolve(old.join_waiter, self.join_error(ErrorCode.fenced_instance_id, old.member_id))
        _resolve(old.sync_waiter, SyncResult(ErrorCode.fenced_instance_id))
        member = Member(new_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocols)
        member.assignment = old.assignment
        self.members = {(new_id if k == old.member_id else k): (member if k == old.member_id else v)
                        for k, v in self.members.items()}
        self.static[instance_id] = new_id
        old_leader = self.leader
        if self.leader == old.member_id:
            self.leader = new_id
        if old.member_id in self.pending_sync:
            self.pending_sync.discard(old.member_id)
            self.pending_sync.add(new_id)
        if self.state == STABLE and self.select_protocol() == self.protocol_name:
            # Kafka's rule: no rebalance while the protocol choice stands; the answer names the
            # previous leader id, so a restarted leader does not run a pointless assignment
            # (a Stable group would not hand it out), and SyncGroup returns the kept assignment.
            self._arm_expiry(member)
            if self.persist(self) == ErrorCode.none:
                return JoinResult(ErrorCode.none, self.generation, self.protocol_type, self.protocol_name,
                                  old_leader or "", new_id)
        member.join_waiter = asyncio.get_running_loop().create_future()
        self._maybe_prepare_rebalance()
        self._check_join_done()
        return await member.join_waiter

    def _maybe_prepare_rebalance(self) -> None:
        if self.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance()

    def _prepare_rebalance(self) -> None:
        if self.state == COMPLETING:  # an assignment in progress is void
            for m in self.members.values():
                m.assignment = b""
                _resolve(m.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        if self._sync_timer is not None:
            self._sync_timer.cancel()
        self.pending_sync.clear()
        rebalance_ms = max((m.rebalance_ms for m in self.members.values()), default=0)
        if self.state == EMPTY and self.config.initial_rebalance_delay_ms > 0:
            # KIP-134: let the other members of a starting group arrive before assigning.
            delay = self.config.initial_rebalance_delay_ms
            self._initial_delay, self._new_member_added = True, False
            self._join_timer = self.clock.call_later(delay, self._on_initial_delay, max(rebalance_ms - delay, 0))
        else:
            self._initial_delay = False
            self._join_timer = self.clock.call_later(rebalance_ms, self._complete_join)
        self._set_state(PREPARING)

    def _on_initial_delay(self, remaining_ms: int) -> None:
        if self._new_member_added and remaining_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            self._new_member_added = False
            self._join_timer = self.clock.call_later(delay, self._on_initial_delay, max(remaining_ms - delay, 0))
            return
        self._complete_join()

    def _check_join_done(self) -> None:
        if (self.state == PREPARING and not self._initial_delay and not self.pending
                and all(m.awaiting_join for m in self.members.values())):
            self._complete_join()

    def _complete_join(self) -> None:
        if self.state != PREPARING:
            return
        if self._join_timer is not None:
            self._join_timer.cancel()
        self._initial_delay = False
        for m in list(self.members.values()):
            if not m.awaiting_join and m.instance_id is None:  # static members keep their place
                self._remove(m, rebalance=False)
        joined = [m for m in self.members.values() if m.awaiting_join]
        if self.leader not in self.members or not self.members[self.leader].awaiting_join:
            self.leader = joined[0].member_id if joined else None
        self.generation += 1
        if not self.members or not joined:
            for m in list(self.members.values()):
                self._remove(m, rebalance=False)
            self.protocol_name, self.leader = None, None
            self._set_state(EMPTY)
            self.persist(self)
            return
        self.protocol_name = self.select_protocol()
        self._set_state(COMPLETING)
        for m in self.members.values():
            _resolve(m.join_waiter, self._join_answer(m))
            self._arm_expiry(m)
        # Kafka's pending-sync timeout: members that never send SyncGroup are removed.
        self.pending_sync = set(self.members)
        rebalance_ms = max(m.rebalance_ms for m in self.members.values())
        self._sync_timer = self.clock.call_later(rebalance_ms, self._on_sync_timeout, self.generation)

    def _on_sync_timeout(self, generation: int) -> None:
        if generation != self.generation or self.state not in (COMPLETING, STABLE) or not self.pending_sync:
            return
        for member_id in list(self.pending_sync):
            if member_id in self.members:
                self._remove(self.members[member_id], rebalance=False)
        self.pending_sync.clear()
        if self.state in (COMPLETING, STABLE):
            self._prepare_rebalance()
            self._check_join_done()

    # --- SyncGroup -------------------------------------------------------------------
    def check_member(self, member_id, instance_id, generation) -> ErrorCode:
        """The error a request from this member at this generation gets (0 if none)."""
        if self.state == DEAD:
            return ErrorCode.coordinator_not_available
        if self._fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none


    async def sync(self, member_id, instance_id, generation, protocol_type, protocol_name,
                   assignments) -> SyncResult:
        error = self.check_member(member_id, instance_id, generation)
        if error == ErrorCode.none and ((protocol_type and protocol_type != self.protocol_type)
                                or (protocol_name and protocol_name != self.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error == ErrorCode.none and self.state == EMPTY:
            error = ErrorCode.unknown_member_id
        if error == ErrorCode.none and self.state == PREPARING:
            error = ErrorCode.rebalance_in_progress
        if error != ErrorCode.none:
            return SyncResult(error)
        member = self.members[member_id]
        self.pending_sync.discard(member_id)
        self._arm_expiry(member)
        if self.state == STABLE:
            return SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment)
        member.sync_waiter = waiter = asyncio.get_running_loop().create_future()
        if member_id == self.leader:
            given = dict(assignments)
            for m in self.members.values():
                m.assignment = given.get(m.member_id, b"")
            if self.persist(self) != ErrorCode.none:
                for m in self.members.values():
                    m.assignment = b""
                    _resolve(m.sync_waiter, SyncResult(ErrorCode.coordinator_not_available))
                self._prepare_rebalance()
                return await waiter
            self._set_state(STABLE)
            for m in self.members.values():
                _resolve(m.sync_waiter,
                         SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, m.assignment))
                # a session that ran out while it waited for the leader starts again
                # now (its expiry was skipped then), so a member that dies next is noticed
                self._arm_expiry(m)
        return await waiter

    # --- Heartbeat / LeaveGroup / expiry ---------------------------------------------
    def heartbeat(self, member_id, instance_id, generation) -> ErrorCode:
        error = self.check_member(member_id, instance_id, generation)
        if error != ErrorCode.none:
            return error
        if self.state == EMPTY:
            return ErrorCode.unknown_member_id
        self._arm_expiry(self.members[member_id])
        return ErrorCode.rebalance_in_progress if self.state == PREPARING else ErrorCode.none

    def touch(self, member_id: str) -> None:
        """A commit from a member counts as a heartbeat, as in Kafka."""
        member = self.members.get(member_id)
        if member is not None and member.expiry is not None:
            self._arm_expiry(member)

    def leave(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if self.state == DEAD:
            return ErrorCode.coordinator_not_available
        if instance_id is not None:
            known = self.static.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != known:
                return ErrorCode.fenced_instance_id
            member_id = known
        if member_id in self.pending:
            self.pending.pop(member_id).cancel()
            self._check_join_done()
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove(member)
        return ErrorCode.none

    def _on_expiry(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is None or member.awaiting_join or member.awaiting_sync:
            return  # kept alive while it waits on us; the join/sync timeouts cover it
        self._remove(member)

    def _on_pending_expiry(self, member_id: str) -> None:
        if self.pending.pop(member_id, None) is not None:
            self._check_join_done()

    def _remove(self, member: Member, rebalance: bool = True) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        _resolve(member.join_waiter, self.join_error(ErrorCode.unknown_member_id, member.member_id))
        _resolve(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id))
        self.members.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]
        self.pending_sync.discard(member.member_id)
        if self.leader == member.member_id:
            self.leader = next(iter(self.members), None)
        if not rebalance:
            return
        if self.state in (STABLE, COMPLETING):
            self._prepare_rebalance()
        self._check_join_done()

    # --- life cycle --------------------------------------------------------------------
    def close(self, state: GroupState = DEAD) -> None:
        """Deleted, expired or unloaded: waiters are answered, timers stopped."""
        for timer in (self._join_timer, self._sync_timer, *self.pending.values()):
            if timer is not None:
                timer.cancel()
        self.pending.clear()
        for m in list(self.members.values()):
            if m.expiry is not None:
                m.expiry.cancel()
            _resolve(m.join_waiter, self.join_error(ErrorCode.not_coordinator, m.member_id))
            _resolve(m.sync_waiter, SyncResult(ErrorCode.not_coordinator))
        self._set_state(state)

    def restore(self, generation, protocol_type, protocol_name, leader, state_timestamp, members) -> None:
        """From a GroupMetadataValue at load: members resume as Stable and must heartbeat
        within their session timeout, as after a Kafka coordinator failover."""
        self.generation, self.protocol_type, self.protocol_name = generation, protocol_type or None, protocol_name
        for mv in members:
            m = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host, mv.session_timeout,
                       mv.rebalance_timeout, [(protocol_name, mv.subscription)])
            m.assignment = mv.assignment
            self.members[m.member_id] = m
            if m.instance_id is not None:
                self.static[m.instance_id] = m.member_id
            self._arm_expiry(m)
        self.leader = leader if leader in self.members else next(iter(self.members), None)
        self.state = STABLE if self.members else EMPTY
        self.state_timestamp = state_timestamp if state_timestamp >= 0 else self.clock.now_ms()

    def describe(self) -> GroupDescription:
        """DescribeGroups: protocol data, metadata and assignments only once Stable, as in Kafka."""
        stable = self.state == STABLE
        members = [DescribedMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                   m.metadata(self.protocol_name) if stable else b"",
                                   m.assignment if stable else b"")
                   for m in self.members.values()]
        return GroupDescription(ErrorCode.none, self.state.value, self.protocol_type or "",
                                (self.protocol_name or "") if stable else "", members)
