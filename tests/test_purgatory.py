"""The purgatory's offset queue (acks=all produces waiting on a partition's
high watermark): answered in order as the level passes them, all at once
when the partition stops being led under their epoch, the failed ones when
an fsync fails, and a poke reads the level once however many wait."""

import asyncio

from hpbroker.workers.purgatory import Purgatory

KEY = ("t", 0)


class Level:
    """A partition as the queue sees it: a high watermark, a leadership, an fsync failure."""

    def __init__(self):
        self.value = 0
        self.leading = True
        self.failed_up_to = -1  # offsets at or below this one wait on an fsync that failed
        self.reads = 0

    def level(self) -> int:
        self.reads += 1
        return self.value

    def wait(self, purgatory: Purgatory, offset: int, token: object = 1, timeout_s: float = 10.0):
        return asyncio.ensure_future(purgatory.wait_for_offset(
            KEY, offset, timeout_s, token, self.level, lambda: self.leading,
            lambda: self.failed_up_to >= 0, lambda end: end <= self.failed_up_to))


async def settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_waiters_are_answered_in_order_as_the_level_passes_them_and_a_poke_reads_it_once():
    async def scenario():
        purgatory, partition = Purgatory(), Level()
        waiting = [(offset, partition.wait(purgatory, offset)) for offset in (30, 10, 20, 20, 40)]
        await settled()
        assert purgatory.watched(KEY) == 5 and not any(w.done() for _, w in waiting)
        partition.value, partition.reads = 20, 0
        purgatory.poke(KEY)
        await settled()
        assert partition.reads == 1
        assert sorted(o for o, w in waiting if w.done()) == [10, 20, 20]
        assert all(w.result() for _, w in waiting if w.done())
        assert purgatory.watched(KEY) == 2
        partition.value = 40
        purgatory.poke(KEY)
        assert all(await asyncio.gather(*(w for _, w in waiting)))
        assert purgatory.watched(KEY) == 0

    asyncio.run(scenario())


def test_a_waiter_already_passed_or_out_of_time_does_not_queue():
    async def scenario():
        purgatory, partition = Purgatory(), Level()
        partition.value = 5
        assert await partition.wait(purgatory, 5)
        assert not await partition.wait(purgatory, 6, timeout_s=0)
        assert not await partition.wait(purgatory, 6, timeout_s=0.01)  # its time ran out
        assert purgatory.watched(KEY) == 0

    asyncio.run(scenario())


def test_leadership_lost_answers_every_waiter_and_a_new_epoch_starts_a_new_queue():
    async def scenario():
        purgatory, partition = Purgatory(), Level()
        old = [partition.wait(purgatory, offset, token="epoch 1") for offset in (10, 20)]
        await settled()
        # a waiter from a later leader epoch answers the ones left under the earlier one
        new = partition.wait(purgatory, 30, token="epoch 2")
        await settled()
        assert all(w.done() and w.result() for w in old) and not new.done()
        partition.leading = False
        purgatory.poke(KEY)
        assert await new
        assert purgatory.watched(KEY) == 0

    asyncio.run(scenario())


def test_a_failed_fsync_answers_only_the_waiters_it_covers():
    async def scenario():
        purgatory, partition = Purgatory(), Level()
        waiting = {offset: partition.wait(purgatory, offset) for offset in (10, 20, 30)}
        await settled()
        partition.failed_up_to = 20
        purgatory.poke(KEY)
        await settled()
        assert [o for o, w in waiting.items() if w.done()] == [10, 20]
        partition.failed_up_to, partition.value = -1, 30
        purgatory.poke(KEY)
        assert await waiting[30]

    asyncio.run(scenario())


def test_waiters_that_time_out_or_are_cancelled_leave_nothing_behind():
    async def scenario():
        purgatory, partition = Purgatory(), Level()
        short = partition.wait(purgatory, 10, timeout_s=0.01)
        cancelled = partition.wait(purgatory, 20)
        kept = partition.wait(purgatory, 30)
        await settled()
        assert not await short
        cancelled.cancel()
        await settled()
        assert purgatory.watched(KEY) == 1
        partition.value = 30
        purgatory.poke(KEY)
        assert await kept
        assert purgatory.watched(KEY) == 0 and not purgatory._offsets

    asyncio.run(scenario())
