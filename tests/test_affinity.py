"""When a connection is due to move: only after ``after`` partition requests
in a row all went to the same other worker."""

import contextvars

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
