"""The leader's ISR and high-watermark rules, on a clock the test sets."""

from hpbroker.replication.isr import LeaderState

LAG_MS = 10_000


def leader(isr=(1, 2, 3), hw=0, epoch_start=0) -> LeaderState:
    state = LeaderState(1, leader_epoch=1, epoch_start_offset=epoch_start, isr=list(isr), replicas=[1, 2, 3],
                        high_watermark=hw, lag_time_max_ms=LAG_MS)
    state.start_clock(0)
    return state


def test_the_high_watermark_is_the_least_log_end_of_the_isr():
    state = leader()
    assert not state.advance_high_watermark(100)  # followers unheard of: nothing committed
    state.follower_fetched(2, 60, 100, now_ms=1)
    state.follower_fetched(3, 80, 100, now_ms=1)
    assert state.advance_high_watermark(100) and state.high_watermark == 60
    state.follower_fetched(2, 100, 100, now_ms=2)
    state.advance_high_watermark(100)
    assert state.high_watermark == 80


def test_the_high_watermark_never_moves_back():
    state = leader(hw=50)
    state.follower_fetched(2, 10, 100, now_ms=1)
    state.follower_fetched(3, 10, 100, now_ms=1)
    assert not state.advance_high_watermark(100) and state.high_watermark == 50


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time():
    state = leader()
    state.follower_fetched(2, 100, 100, now_ms=1000)
    state.follower_fetched(3, 100, 100, now_ms=1000)
    assert state.isr_change(100, now_ms=1000 + LAG_MS) is None
    state.follower_fetched(2, 100, 100, now_ms=1000 + LAG_MS)
    assert state.isr_change(100, now_ms=1001 + LAG_MS) == [1, 2]


def test_a_follower_keeping_up_with_a_steady_stream_stays_in_sync():
    """Each fetch reaches the leader's end of the previous fetch, never the
    current one (appends keep coming): it stays caught up."""
    state = leader()
    end = 100
    for t in range(0, 5 * LAG_MS, 500):
        state.follower_fetched(2, end, end + 10, now_ms=t)
        state.follower_fetched(3, end, end + 10, now_ms=t)
        end += 10
    assert state.isr_change(end, now_ms=5 * LAG_MS) is None


def test_a_follower_rejoins_once_it_holds_the_high_watermark_and_the_epoch():
    state = leader(isr=(1, 2), hw=100, epoch_start=120)
    state.follower_fetched(2, 200, 200, now_ms=5)
    state.follower_fetched(3, 110, 200, now_ms=5)
    assert state.isr_change(200, now_ms=5) is None  # 3 has the high watermark but not the epoch's start
    state.follower_fetched(3, 150, 200, now_ms=6)
    assert state.isr_change(200, now_ms=6) == [1, 2, 3]
    state.isr_applied([1, 2, 3])
    assert state.isr == [1, 2, 3]


def test_a_fetch_from_a_broker_that_is_not_a_replica_changes_nothing():
    state = leader()
    state.follower_fetched(9, 100, 100, now_ms=1)
    assert 9 not in state.followers


def test_a_follower_that_restarted_starts_over_and_leaves_the_isr():
    """Its fetches carry its broker epoch: what the earlier incarnation fetched
    (and the caught-up time it earned) is not the new one's."""
    state = leader()
    registered = {1: 10, 2: 20, 3: 30}
    state.follower_fetched(2, 100, 100, now_ms=1, broker_epoch=20)
    state.follower_fetched(3, 100, 100, now_ms=1, broker_epoch=30)
    assert state.advance_high_watermark(100) and state.isr_change(100, now_ms=2, registered=registered) is None
    registered[3] = 31  # restarted, empty
    state.follower_fetched(3, 0, 100, now_ms=3, broker_epoch=31)
    assert state.followers[3].log_end == 0
    assert state.isr_change(100, now_ms=4, registered=registered) == [1, 2]
    state.isr_applied([1, 2])
    state.follower_fetched(3, 100, 100, now_ms=5, broker_epoch=30)  # a late fetch of the old one
    assert state.followers[3].log_end == 0 and state.isr_change(100, now_ms=6, registered=registered) is None
    state.follower_fetched(3, 100, 100, now_ms=7, broker_epoch=31)
    assert state.isr_change(100, now_ms=8, registered=registered) == [1, 2, 3]


def test_only_the_registered_incarnation_can_join():
    """Progress of an incarnation ZooKeeper no longer registers (or not yet:
    the leader's image lags) never lets the replica in."""
    state = leader(isr=(1, 2), hw=100)
    state.follower_fetched(3, 100, 100, now_ms=1, broker_epoch=30)
    assert state.isr_change(100, now_ms=2, registered={1: 10, 2: 20}) is None  # not registered at all
    assert state.isr_change(100, now_ms=2, registered={1: 10, 2: 20, 3: 33}) is None  # registered again since
    assert state.isr_change(100, now_ms=2, registered={1: 10, 2: 20, 3: 30}) == [1, 2, 3]


def test_an_isr_member_registered_after_the_isr_was_written_is_out():
    """It restarted after the ISR was decided (the leader may never have seen it
    go): the incarnation in the ISR is not this one."""
    state = leader()
    for replica in (2, 3):
        state.follower_fetched(replica, 100, 100, now_ms=1)
    assert state.isr_change(100, now_ms=2, registered={1: 10, 2: 20, 3: 30}, isr_zxid=50) is None
    assert state.isr_change(100, now_ms=2, registered={1: 10, 2: 20, 3: 60}, isr_zxid=50) == [1, 2]


def test_time_the_leader_could_not_measure_counts_for_no_lag():
    state = leader()
    state.follower_fetched(2, 100, 100, now_ms=1000)
    state.follower_fetched(3, 100, 100, now_ms=1000)
    stalled = 1000 + LAG_MS + 5000
    state.skip_time(LAG_MS + 5000, now_ms=stalled)  # no fetch could be seen meanwhile
    assert state.isr_change(100, now_ms=stalled + 1) is None
    assert state.isr_change(100, now_ms=stalled + LAG_MS + 1) == [1]
