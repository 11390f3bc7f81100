"""The leader's view of its followers: in sync or not, and the high watermark.

Kafka's rules, with ``now`` passed in so tests set the clock:

* A follower's fetch at offset f says it holds everything below f.
* It is caught up at a fetch if f reaches the leader's log end as it was at
  that fetch; or, failing that, if f reaches the log end as it was at the
  follower's previous fetch (then it was caught up as of that earlier time:
  a steady stream of appends must not make a keeping-up follower look late).
* A follower leaves the ISR when it has not been caught up for
  ``replica.lag.time.max.ms``; it joins again once it holds everything up to
  the high watermark and everything of the current leader epoch.
* The high watermark is the least log end among the ISR (the leader
  included) and never moves back while this broker leads.

The leader proposes ISR changes (``isr_change``); they take effect when
ZooKeeper accepted them (``isr_applied``), so the ISR the high watermark uses
is never wider than the one a new leader would be elected from.

Incarnations (KIP-380's broker epoch, KIP-903's rule): a follower's fetch
carries its broker epoch, the zxid of its registration, so a restarted
follower (perhaps on an empty disk) is told from the one before it.  What
an earlier incarnation fetched never counts for a later one: its progress
starts over, it leaves the ISR at once if it was in it, and it joins only
once it has fetched up to the high watermark as the incarnation ZooKeeper
registers now.  A member of the ISR that registered again after the ISR was
written (``registered`` newer than ``isr_zxid``) is out too: nothing shows
that this incarnation holds what the ISR promised.

Time the leader could not measure (a stalled process, a leadership in doubt
while its session is confirmed) is skipped (``skip_time``), so nobody leaves
the ISR for fetches the leader was not there to see.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FollowerProgress:
    log_end: int = -1  # unknown until its first fetch
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = -1
    broker_epoch: int = -1  # the incarnation these fetches came from; -1 unknown
    log_start: int = -1  # the follower's log start offset, as its last fetch said (DeleteRecords waits on it)
    restarted: bool = False  # replaced an incarnation seen before: any place in the ISR was that one's


@dataclass
class LeaderState:
    broker_id: int
    leader_epoch: int
    epoch_start_offset: int  # the leader's log end when it took this epoch
    isr: list[int]
    replicas: list[int]
    high_watermark: int
    lag_time_max_ms: int
    followers: dict[int, FollowerProgress] = field(default_factory=dict)

    def __post_init__(self):
        for replica in self.replicas:
            if replica != self.broker_id:
                # a new leader gives every follower the full lag time to show up
                self.followers.setdefault(replica, FollowerProgress(last_caught_up_ms=0))

    def start_clock(self, now_ms: int) -> None:
        for progress in self.followers.values():
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)

    def skip_time(self, gap_ms: int, now_ms: int) -> None:
        """``gap_ms`` up to ``now_ms`` went unmeasured: it counts for nobody's lag."""
        for progress in self.followers.values():
            if progress.last_caught_up_ms > 0:
                progress.last_caught_up_ms = min(now_ms, progress.last_caught_up_ms + gap_ms)

    def follower_fetched(self, replica: int, fetch_offset: int, leader_log_end: int, now_ms: int,
                         broker_epoch: int = -1, log_start: int = -1) -> None:
        progress = self.followers.get(replica)
        if progress is None:
            return  # not a replica of this partition (a stale follower): it gets an error elsewhere
        if broker_epoch != progress.broker_epoch:
            if 0 <= broker_epoch < progress.broker_epoch:
                return  # from an incarnation already replaced: says nothing of the current one
            # Another incarnation: what the one before fetched does not count, and
            # it is out of the ISR until it is caught up itself; a first fetch after
            # a leader change (no incarnation seen yet) keeps the grace it was given.
            restarted = progress.broker_epoch >= 0 or progress.restarted
            progress = self.followers[replica] = FollowerProgress(
                last_caught_up_ms=0 if restarted else progress.last_caught_up_ms, broker_epoch=broker_epoch,
                restarted=restarted)
        if fetch_offset >= leader_log_end:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end = fetch_offset
        progress.log_start = log_start
        progress.last_fetch_ms = now_ms
        progress.leader_end_at_last_fetch = leader_log_end

    def advance_high_watermark(self, leader_log_end: int) -> bool:
        """Recompute from the ISR; True when it moved."""
        ends = [leader_log_end]
        for replica in self.isr:
            if replica != self.broker_id:
                ends.append(self.followers[replica].log_end if replica in self.followers else -1)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def isr_change(self, leader_log_end: int, now_ms: int, registered: dict[int, int] | None = None,
                   isr_zxid: int = -1) -> list[int] | None:
        """The ISR this leader should propose now, or None when it is right.
        ``registered``: broker id -> broker epoch of the registered brokers
        (None: not known, every follower taken as registered); ``isr_zxid``: the
        zxid at which the current ISR was written."""
        keep = [self.broker_id]
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            if (progress is not None and now_ms - progress.last_caught_up_ms <= self.lag_time_max_ms
                    and not progress.restarted and not _registered_since(replica, registered, isr_zxid)):
                keep.append(replica)
        for replica, progress in self.followers.items():
            if replica not in keep and self._caught_up(replica, progress, now_ms, registered):
                keep.append(replica)
        wanted = [r for r in self.replicas if r in keep]
        return None if sorted(wanted) == sorted(self.isr) else wanted

    def _caught_up(self, replica: int, progress: FollowerProgress, now_ms: int,
                   registered: dict[int, int] | None) -> bool:
        if registered is not None and (replica not in registered or progress.broker_epoch != registered[replica]
                                       or progress.broker_epoch < 0):
            return False  # only the registered incarnation's own fetches count
        return (progress.log_end >= self.high_watermark and progress.log_end >= self.epoch_start_offset
                and now_ms - progress.last_caught_up_ms <= self.lag_time_max_ms)

    def isr_applied(self, isr: list[int]) -> None:
        for replica in set(isr) - set(self.isr):
            if replica in self.followers:
                self.followers[replica].restarted = False  # joined as the incarnation it is now
        self.isr = list(isr)


def _registered_since(replica: int, registered: dict[int, int] | None, isr_zxid: int) -> bool:
    return registered is not None and 0 <= isr_zxid < registered.get(replica, -1)
