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
connections gather instead (``gathering.py``): each one whose recent writes went
to several workers moves to the lowest-numbered of them, the same choice for
every such connection, so they all end up on one worker.  That worker then
forwards every append to the other workers' partitions, nobody else writes
them, and they move to it (``partition_moves.py``): from then on nothing
crosses.  Gathering trades cores for round trips, so it happens only while
the whole broker is lightly loaded, and a worker saturated by what gathered
on it spreads it out again (``gathering.py``); while it is spread out, each
such connection goes to a worker of its own (``spot_of``).
"""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpbroker.workers.gathering import Gathering

# the Route of the connection whose request is being handled (set by its task)
ROUTE: ContextVar[Route | None] = ContextVar("route", default=None)


class Route:
    """The owners of a connection's recent partition requests."""

    __slots__ = ("after", "worker", "streak", "gathering", "writes", "wrote_to", "client_port")

    def __init__(self, after: int, gathering: Gathering | None = None):
        self.after = after
        self.worker = -1  # the one owner of the last ``streak`` requests; -1: several
        self.streak = 0
        self.gathering = gathering  # None: a connection spread over workers stays where it is
        self.writes = 0  # the connection's write requests so far
        self.wrote_to: dict[int, int] = {}  # a worker -> the number (in ``writes``) of the last write it owned
        self.client_port = -1  # names its worker while a spread-out broker holds gathering off (``spot_of``)

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

    def spread(self) -> bool:
        """Whether the connection's recent writes went to several workers' partitions."""
        return len(self._recent_writes()) > 1

    def _recent_writes(self) -> list[int]:
        """The workers owning what it wrote of late (four times ``after`` writes:
        a run of ``after`` to one of them is chance, not a change of partitions)."""
        if self.writes < self.after:
            return []
        return [worker for worker, n in self.wrote_to.items() if self.writes - n < 4 * self.after]

    def elsewhere(self, here: int) -> int | None:
        """The worker this connection should move to, or None to stay ``here``."""
        if self.after <= 0:
            return None
        recent = self._recent_writes()
        if len(recent) > 1:
            gathering = self.gathering
            if gathering is None:
                return None
            if gathering.held():  # spread out: each such connection to a worker of its own
                spot = spot_of(self.client_port, gathering.loads.workers) if self.client_port >= 0 else here
                return spot if spot != here else None
            home = min(recent)
            return home if home != here and gathering.light() else None  # allowed(), the hold just asked
        if self.streak >= self.after and self.worker != here:
            return self.worker
        return None


def spot_of(client_port: int, workers: int) -> int:
    """A connection's worker while the broker is spread out, the same on every
    worker it passes through.  The port is mixed first: Linux gives connect()
    ports of one parity."""
    return ((client_port * 0x9E3779B1) >> 16 & 0xFFFF) % workers


def saw(workers: Collection[int], writes: bool = False) -> None:
    """Note the owners of a partition request for the connection it came on (if any)."""
    route = ROUTE.get()
    if route is not None:
        route.saw(workers, writes)
