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
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FollowerProgress:
    log_end: int = -1  # unknown until its first fetch
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = -1


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

    def follower_fetched(self, replica: int, fetch_offset: int, leader_log_end: int, now_ms: int) -> None:
        progress = self.followers.get(replica)
        if progress is None:
            return  # not a replica of this partition (a stale follower): it gets an error elsewhere
        if fetch_offset >= leader_log_end:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end = fetch_offset
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

    def isr_change(self, leader_log_end: int, now_ms: int) -> list[int] | None:
        """The ISR this leader should propose now, or None when it is right."""
        keep = [self.broker_id]
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            if progress is not None and now_ms - progress.last_caught_up_ms <= self.lag_time_max_ms:
                keep.append(replica)
        for replica, progress in self.followers.items():
            if replica not in keep and self._caught_up(progress, leader_log_end, now_ms):
                keep.append(replica)
        wanted = [r for r in self.replicas if r in keep]
        return None if sorted(wanted) == sorted(self.isr) else wanted

    def _caught_up(self, progress: FollowerProgress, leader_log_end: int, now_ms: int) -> bool:
        return (progress.log_end >= self.high_watermark and progress.log_end >= self.epoch_start_offset
                and now_ms - progress.last_caught_up_ms <= self.lag_time_max_ms)

    def isr_applied(self, isr: list[int]) -> None:
        self.isr = list(isr)
