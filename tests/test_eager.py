"""``hpbroker/workers/eager.py``: a coroutine run at once in a given context,
carried on by a task only when it waits, with the task giving its result,
its exception and taking its cancellation as the coroutine itself would."""

import asyncio
import contextvars
import pathlib
import re

import pytest

from hpbroker.workers import eager

WHO = contextvars.ContextVar("who", default="nobody")
TIMEOUT_S = 5


def _context(name: str) -> contextvars.Context:
    context = contextvars.copy_context()
    context.run(WHO.set, name)
    return context


def run(main):
    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))


def test_a_coroutine_that_never_waits_finishes_in_the_call_in_its_context_and_without_a_task():
    async def work():
        return WHO.get(), asyncio.current_task()

    async def main():
        (who, task), carried = eager.start(work(), _context("client"))
        assert (who, task, carried) == ("client", asyncio.current_task(), None)  # in the caller's turn
        assert WHO.get() == "nobody"  # the caller's context is untouched
    run(main)


def test_a_coroutine_that_waits_goes_on_in_a_task_in_the_same_context():
    async def main():
        gate = asyncio.get_running_loop().create_future()
        seen = []

        async def work():
            seen.append(WHO.get())
            value = await gate
            seen.append(WHO.get())
            await asyncio.sleep(0)  # a bare yield of its turn is carried too
            return value * 2

        result, task = eager.start(work(), _context("client"))
        assert result is None and task is not None and seen == ["client"]
        gate.set_result(21)
        assert await task == 42 and seen == ["client", "client"]
    run(main)


def test_an_exception_before_the_first_wait_is_raised_by_start():
    async def work():
        raise ValueError("at once")

    async def main():
        with pytest.raises(ValueError, match="at once"):
            eager.start(work(), contextvars.copy_context())
    run(main)


def test_an_exception_after_a_wait_comes_out_of_the_task_and_the_coroutine_sees_the_future_fail():
    async def main():
        gate = asyncio.get_running_loop().create_future()
        caught = []

        async def work():
            try:
                await gate
            except KeyError as exc:
                caught.append(exc)
                raise RuntimeError("after the wait") from exc

        _, task = eager.start(work(), contextvars.copy_context())
        assert task is not None
        gate.set_exception(KeyError("gate"))
        with pytest.raises(RuntimeError, match="after the wait"):
            await task
        assert len(caught) == 1
    run(main)


def test_cancelling_the_task_cancels_what_the_coroutine_waits_on_and_runs_its_cleanup():
    async def main():
        gate = asyncio.get_running_loop().create_future()
        cleaned = asyncio.Event()

        async def work():
            try:
                await gate
            finally:
                cleaned.set()

        _, task = eager.start(work(), contextvars.copy_context())
        assert task is not None
        await asyncio.sleep(0)  # the task has taken over the wait
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned.is_set() and gate.cancelled()
    run(main)


def test_a_coroutine_may_catch_the_cancellation_and_finish_with_a_result():
    async def main():
        gate = asyncio.get_running_loop().create_future()

        async def work():
            try:
                await gate
            except asyncio.CancelledError:
                return "caught"

        _, task = eager.start(work(), contextvars.copy_context())
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        assert await task == "caught"
    run(main)


def test_no_code_of_the_broker_needs_to_run_in_a_task_of_its_own():
    """A request is handled without a task when it arrives, so nothing a
    handler may reach can rely on one: ``asyncio.timeout`` and ``timeout_at``
    raise outside a task, ``current_task()`` is None there, a ``TaskGroup``
    needs its parent task.  Bound a block with ``asyncio.wait_for`` instead
    (it runs the block in a task of its own, as ``cluster/admin.py`` does)."""
    package = pathlib.Path(eager.__file__).resolve().parents[1]
    needing_a_task = re.compile(r"asyncio\.(timeout|timeout_at|current_task|TaskGroup)\s*\(")
    found = [f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
             for path in sorted(package.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if needing_a_task.search(line)]
    assert found == []


def test_all_of_awaits_one_in_the_callers_task_and_gathers_several_in_order():
    async def where(value):
        await asyncio.sleep(0)
        return value, asyncio.current_task()

    async def main():
        me = asyncio.current_task()
        assert await eager.all_of([where("a")]) == [("a", me)]  # no task made for it
        several = await eager.all_of([where("b"), where("c")])
        assert [value for value, _ in several] == ["b", "c"]
        assert all(task is not me for _, task in several)
        assert await eager.all_of([]) == []
    run(main)
