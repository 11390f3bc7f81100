"""When a connection is due to move: after ``after`` partition requests in a
row all went to the same other worker, or, while the broker is lightly
loaded, when its recent writes went to several workers (it gathers on the
lowest-numbered of them)."""

import contextvars

from hpbroker.shared.worker_loads import WorkerLoads
from hpbroker.workers import affinity
from hpbroker.workers.affinity import Route


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


class _Loads:
    """``WorkerLoads``' reading side, with the total set by the test."""

    def __init__(self, total: float):
        self.cores = total

    def total(self) -> float:
        return self.cores


def _gathering(total: float = 0.2) -> affinity.Gathering:
    return affinity.Gathering(_Loads(total), cores=1.5)  # type: ignore[arg-type]


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
    loads.publish(2, 0.5)
    assert (loads.share(0), loads.share(1), loads.total()) == (0.25, 0.0, 0.75)
    assert affinity.Gathering(loads, cores=0.7).allowed() is False
