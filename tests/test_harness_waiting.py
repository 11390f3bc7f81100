"""harness.waiting: the value comes back, a timeout names what never happened,
and the ``turns`` form spends loop turns, not wall time."""

import asyncio
import itertools
import time

import pytest

from harness.waiting import until, wait_for


def test_wait_for_returns_the_first_truthy_value():
    polls = itertools.count()
    assert wait_for(lambda: next(polls) >= 3 and "ready", 5, "three polls", interval=0) == "ready"


def test_wait_for_names_what_it_waited_for():
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="the broker to answer"):
        wait_for(lambda: None, 0.1, "the broker to answer")
    assert time.monotonic() - started < 2


def test_until_lets_other_tasks_run_between_polls():
    async def scenario():
        done = []
        asyncio.get_running_loop().call_later(0.05, done.append, "set")
        return await until(lambda: done and done[0], "the timer to fire", timeout=5)
    assert asyncio.run(scenario()) == "set"


def test_until_by_turns_never_sleeps():
    async def scenario():
        state = []

        async def other():
            for _ in range(3):
                await asyncio.sleep(0)
            state.append("moved")
        task = asyncio.ensure_future(other())
        await until(lambda: state, "the other task to move", turns=10)
        with pytest.raises(TimeoutError, match="50 turns of the event loop waiting for nothing"):
            await until(lambda: False, "nothing", turns=50)
        await task
    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < 1
