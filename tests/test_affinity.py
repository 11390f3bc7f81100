"""When a connection is due to move: after ``after`` partition requests in a
row all went to the same other worker, or, while the broker is lightly
loaded, when its recent writes went to several workers (it gathers on the
lowest-numbered of them)."""

import contextvars

import pytest

from hpbroker.shared.worker_loads import WorkerLoads
from hpbroker.workers import affinity
from hpbroker.workers.affinity import Route
from hpbroker.workers.gathering import HOLD_S, CoreIdle, Gathering


def test_a_streak_of_requests_to_one_other_worker_names_it():
    route = Route(after=3)
    for _ in range(2):
        route.saw({1})
        assert route.elsewhere(here=0) is None
    route.saw({1})
    assert route.elsewhere(here=0) == 1
    assert route.elsewhere(here=1) is None, "already where its partitions are"


def test_a_request_to_several_workers_or_another_one_starts_over():
    route = Route(after=2)
    route.saw({1})
    route.saw({0, 1})
    route.saw({1})
    assert route.elsewhere(here=0) is None
    route.saw({2})
    assert route.elsewhere(here=0) is None
    route.saw({2})
    assert route.elsewhere(here=0) == 2


def test_zero_turns_moving_off():
    route = Route(after=0)
    for _ in range(100):
        route.saw({1})
    assert route.elsewhere(here=0) is None


def test_owners_are_noted_for_the_connection_whose_task_runs_and_for_no_other():
    route = Route(after=1)
    affinity.saw({1})  # outside any connection: nothing to note, nothing raised
    context = contextvars.copy_context()
    context.run(affinity.ROUTE.set, route)
    context.run(affinity.saw, {1})
    assert route.elsewhere(here=0) == 1


def _gathering(total: float = 0.2) -> Gathering:
    loads = WorkerLoads(2)
    loads.publish(1, total)
    return Gathering(loads, index=0, gather_below=1.5, spread_at=0.9)


def test_a_writer_spread_over_workers_gathers_on_the_lowest_numbered_one():
    route = Route(after=4, gathering=_gathering())
    for i in range(3):
        route.saw({1 + i % 2}, writes=True)
        assert route.elsewhere(here=2) is None, "too few writes to tell yet"
    route.saw({2}, writes=True)
    assert route.elsewhere(here=2) == 1
    assert route.elsewhere(here=1) is None, "already there"


def test_a_run_of_writes_to_one_worker_within_a_spread_is_chance_not_a_move():
    route = Route(after=2, gathering=_gathering())
    route.saw({0}, writes=True)
    route.saw({1}, writes=True)
    route.saw({1}, writes=True)
    assert route.elsewhere(here=0) is None, "worker 1 had a streak, but this connection writes both"
    for _ in range(8):
        route.saw({1}, writes=True)
    assert route.elsewhere(here=0) == 1, "after four times ``after`` writes to worker 1 alone, it follows them"


def test_a_busy_broker_does_not_gather_and_reads_do_not_count():
    busy = Route(after=2, gathering=_gathering(total=1.6))
    reader = Route(after=2, gathering=_gathering())
    for i in range(10):
        busy.saw({i % 2}, writes=True)
        reader.saw({i % 2})
    assert busy.elsewhere(here=1) is None
    assert reader.elsewhere(here=1) is None


def test_without_gathering_a_spread_writer_stays_and_a_streak_still_moves_it():
    route = Route(after=2)
    for i in range(10):
        route.saw({i % 2}, writes=True)
    assert route.elsewhere(here=1) is None
    route.saw({0}, writes=True)
    route.saw({0}, writes=True)
    assert route.elsewhere(here=1) == 0, "as it always did: the last ``after`` requests went to worker 0"


def test_worker_loads_are_shared_per_worker_and_summed():
    loads = WorkerLoads(3)
    loads.publish(0, 0.25)
    loads.publish(2, 0.5, core_idle=0.4)
    assert (loads.share(0), loads.share(1), loads.total()) == (0.25, 0.0, 0.75)
    assert (loads.core_idle(0), loads.core_idle(2)) == (-1.0, 0.4), "-1: not pinned"
    assert Gathering(loads, index=0, gather_below=0.7, spread_at=0.9).allowed() is False


def test_a_spread_out_broker_holds_gathering_off_for_a_while():
    now = [100.0]
    loads = WorkerLoads(2)
    first = Gathering(loads, index=0, gather_below=1.5, spread_at=0.9, clock=lambda: now[0])
    other = Gathering(loads, index=1, gather_below=1.5, spread_at=0.9, clock=lambda: now[0])
    assert first.allowed() and not other.held()
    first.hold()
    assert not other.allowed() and other.held(), "held across the broker"
    now[0] += HOLD_S
    assert other.allowed()


@pytest.mark.parametrize("other_core_idle, other_share, spreads", [
    (0.9, 0.0, True),  # pinned, its core idle
    (0.3, 0.0, False),  # pinned, its core busy with something else (a benchmark's clients)
    (-1.0, 0.2, True),  # not pinned: what the other worker leaves of a core
    (-1.0, 0.7, False),
])
def test_a_worker_spreads_out_after_three_saturated_beats_with_another_core_idle(other_core_idle, other_share,
                                                                               spreads):
    loads = WorkerLoads(2)
    gathering = Gathering(loads, index=0, gather_below=1.5, spread_at=0.9)
    loads.publish(1, other_share, other_core_idle)
    beats = []
    for share in (0.95, 0.97, 0.5, 0.95, 0.95, 0.99, 0.95):
        loads.publish(0, share)
        beats.append(gathering.due_to_spread())
    assert beats == ([False] * 5 + [True, False] if spreads else [False] * 7), "three in a row, then counted anew"


def test_while_spread_out_a_spread_writer_goes_to_its_own_spot_and_stays_there():
    now = [0.0]
    loads = WorkerLoads(2)
    gathering = Gathering(loads, index=0, gather_below=1.5, spread_at=0.9, clock=lambda: now[0])
    route = Route(after=2, gathering=gathering)
    route.client_port = next(port for port in range(40000, 41000) if affinity.spot_of(port, 2) == 1)
    assert not route.spread()
    for i in range(4):
        route.saw({i % 2}, writes=True)
    assert route.spread()
    assert route.elsewhere(here=1) == 0, "gathering: to the lowest-numbered worker"
    gathering.hold()
    assert route.elsewhere(here=0) == 1, "spread out: to its spot"
    assert route.elsewhere(here=1) is None
    now[0] += HOLD_S
    assert route.elsewhere(here=1) == 0, "the hold over, it gathers again"


def test_spots_spread_ports_of_one_parity_over_the_workers():
    spots = [affinity.spot_of(port, 2) for port in range(40000, 40400, 2)]
    assert 80 <= spots.count(0) <= 120
    assert {affinity.spot_of(port, 4) for port in range(40000, 40080, 2)} == {0, 1, 2, 3}


def test_core_idle_reads_this_machines_cpu0():
    core = CoreIdle(0)
    sum(range(10**6))  # some time passes
    share = core.share()
    assert share == -1.0 or 0.0 <= share <= 1.0


def test_a_beat_publishes_the_cpu_share_since_the_last_one_the_first_only_starts_the_count():
    now = [10.0]
    loads = WorkerLoads(2)
    gathering = Gathering(loads, index=1, gather_below=1.5, spread_at=0.9, clock=lambda: now[0])
    assert gathering.beat() is False and loads.share(1) == 0.0
    sum(range(10**6))  # some CPU time
    now[0] += 1000.0  # and a long while: the share is small, never above one core
    assert gathering.beat() is False
    assert 0.0 < loads.share(1) < 0.01
