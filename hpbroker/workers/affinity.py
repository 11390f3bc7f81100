"""Which worker a client connection's partitions live on, so that the
connection can follow them there.

A request for another worker's partition costs a round trip over the peer
channel: two more sends and two wake-ups of two processes, about as much CPU
again as the request itself on a small produce. Most connections keep asking
for the same partitions (a producer of one partition, a consumer of its
assignment, a follower), so a connection whose last ``after`` partition
requests all went to one other worker is moved to that worker, and its
requests cost no round trip from then on. A connection that touches several
workers' partitions stays where it is.

The move happens only between requests, so no byte is lost or reordered:
nothing buffered or queued, no answer owed or unsent (``KafkaConnection``
checks). A connection that always has a request in hand (a producer keeping
several in flight) gets there by reading no further than the request it has
begun once its move is due. The socket travels through the acceptor as any
new connection does (SCM_RIGHTS, kept there until the new worker has
adopted it, given to another worker if that one is gone); whatever the
client sends meanwhile waits in the kernel's buffer.
``connection.move.after.requests`` sets ``after``; 0 turns moving off.

A producer of a keyless topic writes every partition of it, so its
connection has no one worker to follow, and with partitions on both workers
half its requests cross.  While the broker is lightly loaded such
connections gather instead (``Gathering``): each one whose recent writes went
to several workers moves to the lowest-numbered of them, the same choice for
every such connection, so they all end up on one worker.  That worker then
forwards every append to the other workers' partitions, nobody else writes
them, and they move to it (``partition_moves.py``): from then on nothing
crosses.  Gathering trades cores for round trips, so it happens only while
the whole broker's load (``WorkerLoads``) would still fit one core once
the crossings are gone; nothing spreads a gathered load out again if it
grows later.
"""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar

from hpbroker.shared.worker_loads import WorkerLoads

# the Route of the connection whose request is being handled (set by its task)
ROUTE: ContextVar[Route | None] = ContextVar("route", default=None)


class Gathering:
    """Whether connections spread over several workers may gather on one:
    only while every worker's CPU together stays under ``cores`` of one core
    (a crossing costs about a third of a spread request, so 1.5 cores of
    spread load fit one core once gathered)."""

    def __init__(self, loads: WorkerLoads, cores: float):
        self.loads = loads
        self.cores = cores

    def allowed(self) -> bool:
        return self.loads.total() < self.cores


class Route:
    """The owners of a connection's recent partition requests."""

    __slots__ = ("after", "worker", "streak", "gathering", "writes", "wrote_to")

    def __init__(self, after: int, gathering: Gathering | None = None):
        self.after = after
        self.worker = -1  # the one owner of the last ``streak`` requests; -1: several
        self.streak = 0
        self.gathering = gathering  # None: a connection spread over workers stays where it is
        self.writes = 0  # the connection's write requests so far
        self.wrote_to: dict[int, int] = {}  # a worker -> the number (in ``writes``) of the last write it owned

    def saw(self, workers: Collection[int], writes: bool = False) -> None:
        """A request's partitions were owned by ``workers``; ``writes``: it appends to them."""
        if len(workers) == 1:
            worker = next(iter(workers))
            if worker == self.worker:
                self.streak += 1
            else:
                self.worker, self.streak = worker, 1
        else:
            self.worker, self.streak = -1, 0
        if writes and self.gathering is not None:
            self.writes = n = self.writes + 1
            for worker in workers:
                self.wrote_to[worker] = n

    def elsewhere(self, here: int) -> int | None:
        """The worker this connection should move to, or None to stay ``here``."""
        if self.after <= 0:
            return None
        if self.writes >= self.after:
            # the workers owning what it wrote of late (four times ``after``: a run of
            # ``after`` writes to one of them is a chance, not a change of partitions)
            recent = [worker for worker, n in self.wrote_to.items() if self.writes - n < 4 * self.after]
            if len(recent) > 1:
                home = min(recent)
                if home != here and self.gathering is not None and self.gathering.allowed():
                    return home
                return None
        if self.streak >= self.after and self.worker != here:
            return self.worker
        return None


def saw(workers: Collection[int], writes: bool = False) -> None:
    """Note the owners of a partition request for the connection it came on (if any)."""
    route = ROUTE.get()
    if route is not None:
        route.saw(workers, writes)
