"""Handing accepted connections to workers without losing one on the way.

A connection passes from the acceptor to a worker as an SCM_RIGHTS message on
that worker's control channel.  Three things can go wrong between accept()
and the worker's event loop, and none of them may cost the client its
connection:

* the channel is full (a burst of connections, a worker busy for a moment):
  the connection goes to another worker, or waits here until one can take it;
* the worker is dead or dying: messages still queued in its channel die with
  it, so the acceptor keeps its own descriptor of every connection it sent
  until the worker acknowledges it (``took``), and hands the unacknowledged
  ones to the other workers when the worker is gone;
* the worker is at its file-descriptor limit: the kernel drops the descriptor
  it could not install (MSG_CTRUNC), the worker says ``lost``, and the
  connection, still open here, goes elsewhere.

The acknowledgements come back in the order the connections were sent (the
channel is SOCK_SEQPACKET), so each worker's unacknowledged connections are a
FIFO.

It also keeps the connection quotas' counts true (``connection_quotas.py``):
a connection counts from its accept until its worker says it closed, or the
worker dies; each worker's adopted connections are kept by client address
and listener for that.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections import Counter, deque

from hpbroker.acceptor.connection_quotas import ConnectionQuotas
from hpbroker.server import control_channel
from hpbroker.server.control_channel import Kind, Peer
from hpbroker.server.logging_setup import Throttled

log = logging.getLogger(__name__)

REFUSED_BACKOFF_S = 1.0  # a worker at its fd limit gets no connections for this long
_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ECONNREFUSED, errno.ENOTCONN)  # the worker's end is closed


class HandOff:
    def __init__(self, slots, quotas: ConnectionQuotas):
        self.slots = slots
        self.quotas = quotas
        self.waiting: deque[socket.socket] = deque()  # accepted, not with any worker yet
        self.destined: dict[socket.socket, int] = {}  # waiting ones better served by this worker
        self.origins: dict[socket.socket, Peer] = {}  # held ones' client address and listener
        self.adopted: dict[int, Counter[Peer]] = {}  # worker index -> its connections by origin
        self._problems = Throttled(log)

    def give(self, conn: socket.socket, origin: Peer, to: int | None = None) -> None:
        """A newly accepted connection: to a worker now, or as soon as one can
        take it; to worker ``to`` first when it can (a connection moved to the
        owner of its partitions)."""
        if to is not None:
            self.destined[conn] = to
        self.origins[conn] = origin
        self.quotas.opened(*origin)
        self.waiting.append(conn)
        self.flush()

    def closed(self, slot, origin: Peer) -> None:
        """Worker ``slot`` says a connection of ``origin`` closed (or moved on)."""
        adopted = self.adopted.get(slot.index)
        if adopted is None or adopted[origin] <= 0:
            return  # adopted before this worker's last death: already forgotten
        adopted[origin] -= 1
        if not adopted[origin]:
            del adopted[origin]
        self.quotas.closed(*origin)

    def flush(self) -> None:
        """Send waiting connections, oldest first, while some worker takes them."""
        while self.waiting:
            if not self._send(self.waiting[0]):
                return
            self.waiting.popleft()

    def _send(self, conn: socket.socket) -> bool:
        now = time.monotonic()
        candidates = [s for s in self.slots if s.ready and s.control is not None and now >= s.refused_until]
        destined = self.destined.get(conn)
        for slot in sorted(candidates, key=lambda s: (s.index != destined, s.connections + len(s.unacknowledged))):
            try:
                socket.send_fds(slot.control, [control_channel.encode(Kind.CONN, self.origins[conn])],
                                [conn.fileno()])
            except (BlockingIOError, InterruptedError):
                continue  # its channel is full for now: another worker
            except OSError as exc:
                if exc.errno in _GONE:  # not a candidate until a new worker says ready
                    log.warning("worker %d cannot take connections (%s); handing them to the others", slot.index,
                                exc.strerror)
                    slot.ready = False
                else:  # ENOBUFS, ENOMEM: the kernel is short for a moment
                    self._problems.log(logging.WARNING, ("send", exc.errno), "handing a connection to worker %d "
                                       "failed: %s; trying the others", slot.index, exc.strerror)
                continue
            slot.unacknowledged.append(conn)
            slot.connections += 1
            self.destined.pop(conn, None)
            return True
        return False

    def acknowledged(self, slot, took: bool) -> None:
        """The worker's answer to the oldest connection sent to it."""
        if not slot.unacknowledged:
            return
        conn = slot.unacknowledged.popleft()
        if took:
            origin = self.origins.pop(conn, None)
            if origin is not None:
                self.adopted.setdefault(slot.index, Counter())[origin] += 1
            conn.close()  # the worker holds its own descriptor now
            return
        slot.connections = max(0, slot.connections - 1)
        slot.refused_until = time.monotonic() + REFUSED_BACKOFF_S
        self._problems.log(logging.WARNING, slot.index, "worker %d is at its file-descriptor limit (nofile); its "
                           "new connections go to the other workers", slot.index)
        self.waiting.appendleft(conn)
        self.flush()

    def worker_gone(self, slot) -> None:
        """Connections sent to a worker that died before adopting them go to the
        others; the ones it had adopted died with it."""
        for origin, count in self.adopted.pop(slot.index, Counter()).items():
            for _ in range(count):
                self.quotas.closed(*origin)
        if slot.unacknowledged:
            log.info("handing %d connection(s) that worker %d never adopted to the others", len(slot.unacknowledged),
                     slot.index)
        self.waiting.extendleft(reversed(slot.unacknowledged))
        slot.unacknowledged.clear()
        self.flush()

    def held(self) -> int:
        """Connections whose descriptor the acceptor still holds."""
        return len(self.waiting) + sum(len(s.unacknowledged) for s in self.slots)

    def close_all(self) -> None:
        """At the end of a stop: nothing will serve these any more."""
        for conn in self.waiting:
            conn.close()
        self.waiting.clear()
        self.destined.clear()
        self.origins.clear()
        for slot in self.slots:
            for conn in slot.unacknowledged:
                conn.close()
            slot.unacknowledged.clear()
