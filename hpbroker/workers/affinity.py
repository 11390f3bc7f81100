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
"""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar

# the Route of the connection whose request is being handled (set by its task)
ROUTE: ContextVar[Route | None] = ContextVar("route", default=None)


class Route:
    """The owners of a connection's recent partition requests."""

    __slots__ = ("after", "worker", "streak")

    def __init__(self, after: int):
        self.after = after
        self.worker = -1  # the one owner of the last ``streak`` requests; -1: several
        self.streak = 0

    def saw(self, workers: Collection[int]) -> None:
        """A request's partitions were owned by ``workers``."""
        if len(workers) == 1:
            worker = next(iter(workers))
            if worker == self.worker:
                self.streak += 1
            else:
                self.worker, self.streak = worker, 1
        else:
            self.worker, self.streak = -1, 0

    def elsewhere(self, here: int) -> int | None:
        """The worker this connection should move to, or None to stay ``here``."""
        if self.after > 0 and self.streak >= self.after and self.worker != here:
            return self.worker
        return None


def saw(workers: Collection[int]) -> None:
    """Note the owners of a partition request for the connection it came on (if any)."""
    route = ROUTE.get()
    if route is not None:
        route.saw(workers)
