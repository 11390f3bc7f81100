"""A standalone partition moves to the worker whose connections alone write it.

A produce for another worker's partition costs a round trip over the peer
channel and a wake-up of the owner, about as much CPU again as the produce.
A connection that writes one worker's partitions moves there (``affinity``);
one that writes several workers' partitions cannot, and a producer writing
every partition of a topic over one connection (librdkafka's one connection
per broker) pays the round trip for most of its bytes.  So the partition
moves instead, when nobody else writes it:

* The worker forwarding the appends (``MoveRequests``) counts them per
  partition; after ``partition.move.after.appends`` it asks the owner for the
  partition (``MovePartition``) and holds its own next appends to it until the
  answer comes.  The request travels behind the appends it already sent, so
  they are written first and the held ones follow them to the new owner: the
  order of a connection's batches is kept.
* The owner (``Partitions.move_partition``) agrees only when no one but the
  asker appended to the partition for ``QUIET_S`` (``AppendSources``: each of
  its own connections, while it is open here, and every other worker count),
  it is a standalone partition of a topic that is neither internal nor
  compacted, and no transaction is open on it.  It closes the log without
  an fsync, records the hand-over in the shared ``PartitionMoves`` (with the
  recovery point the new owner opens it with), withdraws it from the
  partition table and wakes the long polls on it, which look again where it
  went.
* Every worker routes by ``Placement``: the hashed owner, or the one the
  latest hand-over names.  A call that reached the old owner after it let go
  is answered NOT_LEADER_OR_FOLLOWER there and asked again of the new one
  (``Owners``).
* After a refusal the asker waits before it counts again, half a second after
  the first and twice as long after each next one up to ``RETRY_AFTER_S``, so
  two workers writing one partition do not ask each other for it without end,
  while connections gathering on one worker (``affinity.py``), whose last
  straggler may still be writing on the owner when the first ask comes, get
  the partition a moment later.

Replicated partitions never move (their state is the ReplicaManager's, and
the cluster's metadata names brokers, not workers), nor do the internal
topics, whose owners the coordinators compute from the hash.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

from hpbroker.server.ownership import OFFSETS_TOPIC, TRANSACTION_TOPIC, partition_owner
from hpbroker.shared.partition_moves import MovesReader

log = logging.getLogger(__name__)

# who appends: a peer's index (set by the peer channel), -2 an unnamed peer, a client connection
# of this worker its own number below that (``connection_source``), -1 this worker itself
CALLER: ContextVar[int] = ContextVar("caller", default=-1)
_CONNECTION_SOURCES = itertools.count(3)

QUIET_S = 10.0  # nobody else appended for this long: the partition may go to its one writer
FIRST_RETRY_AFTER_S = 0.5  # after a first refusal, before the asker counts again
RETRY_AFTER_S = 10.0  # the longest wait after refusals in a row


def connection_source() -> int:
    """A new client connection's ``CALLER``: its appends count apart from the
    worker's other connections', and stop counting once it closes or moves
    away (``AppendSources.left``)."""
    return -next(_CONNECTION_SOURCES)


def movable_topic(topic: str) -> bool:
    """The internal topics' owners are computed from the hash by the coordinators: they never move."""
    return topic != OFFSETS_TOPIC and topic != TRANSACTION_TOPIC


class Placement:
    """Which worker owns a partition: the hash, unless a hand-over says otherwise."""

    def __init__(self, workers: int, moves: MovesReader | None = None):
        self.workers = workers
        self.moves = moves  # None: nothing moves (cluster mode, tests, tools)

    def moved(self) -> bool:
        """Whether any partition has moved yet (until then the hash alone decides)."""
        return self.moves is not None and self.moves.any()

    def owner(self, topic: str, partition: int) -> int:
        if self.moves is not None and movable_topic(topic):
            move = self.moves.move(topic, partition)  # None at once while nothing ever moved
            if move is not None:
                return move.to
        return partition_owner(topic, partition, self.workers)


class AppendSources:
    """The owner's side: when each source last appended to each partition."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._last: dict[tuple[str, int], dict[int, float]] = {}
        # the partitions each source appended to, so that one leaving costs its own partitions' worth
        self._keys_of: dict[int, set[tuple[str, int]]] = {}

    def saw(self, key: tuple[str, int]) -> None:
        sources = self._last.get(key)
        if sources is None:
            sources = self._last[key] = {}
        source = CALLER.get()
        if source not in sources:
            self._keys_of.setdefault(source, set()).add(key)
        sources[source] = self.clock()

    def others_recently(self, key: tuple[str, int], asker: int) -> bool:
        """Whether anyone but ``asker`` appended to the partition in the last ``QUIET_S``."""
        now = self.clock()
        return any(source != asker and now - at < QUIET_S for source, at in self._last.get(key, {}).items())

    def forget(self, key: tuple[str, int]) -> None:
        for source in self._last.pop(key, {}):
            keys = self._keys_of.get(source)
            if keys is not None:
                keys.discard(key)

    def left(self, source: int) -> None:
        """A connection closed or moved to another worker: what it appended
        here no longer keeps a partition here (it may now be what asks)."""
        for key in self._keys_of.pop(source, ()):
            sources = self._last.get(key)
            if sources is not None:
                sources.pop(source, None)


class MoveRequests:
    """The forwarding worker's side: counts its appends per partition owned
    elsewhere, asks for a partition once it has sent enough, and holds its
    next appends to it while it asks."""

    def __init__(self, after: int, ask, clock=time.monotonic, held_off: Callable[[], bool] | None = None):
        self.after = after  # partition.move.after.appends; 0: never ask
        self.ask = ask  # async (topic, partition, owner) -> bool, the owner's answer
        self.clock = clock
        self._sent: dict[tuple[str, int], int] = {}
        self._not_before: dict[tuple[str, int], float] = {}  # refused: not again until then
        self._refusals: dict[tuple[str, int], int] = {}  # refusals in a row, for how long to wait
        self.asking: dict[tuple[str, int], asyncio.Future] = {}  # held appends wait on these
        self._tasks: set[asyncio.Task] = set()
        self.held_off = held_off  # True while no partition is to be asked for (a spread-out broker)

    def forwarded(self, topic: str, partition: int, owner: int) -> None:
        """An append to ``owner``'s partition went over the channel."""
        if self.held_off is not None and self.held_off():
            return
        key = (topic, partition)
        sent = self._sent.get(key, 0) + 1
        if sent < self.after or key in self.asking or not movable_topic(topic):
            self._sent[key] = sent
            return
        self._sent[key] = 0
        not_before = self._not_before.get(key)
        if not_before is not None:
            if self.clock() < not_before:
                return
            del self._not_before[key]
        loop = asyncio.get_running_loop()
        self.asking[key] = loop.create_future()
        task = loop.create_task(self._ask(key, owner))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, key: tuple[str, int], owner: int) -> None:
        granted = False
        try:
            granted = await self.ask(key[0], key[1], owner)
        except Exception:  # a bug: logged; the appends go on to the owner as before
            log.exception("asking worker %d for %s-%d failed", owner, *key)
        finally:
            if granted:
                self._refusals.pop(key, None)
            else:
                refusals = self._refusals[key] = min(self._refusals.get(key, 0) + 1, 8)  # 0.5 * 2**7 > the cap
                self._not_before[key] = self.clock() + min(FIRST_RETRY_AFTER_S * 2 ** (refusals - 1), RETRY_AFTER_S)
            held = self.asking.pop(key)
            held.set_result(granted)

    async def held(self, keys) -> None:
        """Until no question about any of ``keys`` is open."""
        for key in keys:
            waiting = self.asking.get(key)
            if waiting is not None:
                await asyncio.shield(waiting)
