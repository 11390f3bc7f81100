"""The acceptor's workers: one slot per worker, and everything about a
worker's life, from its fork to its last exit code.

A slot stays for the broker's lifetime; the process in it changes.  It names
the CPU its worker is pinned to (by ``worker.cpu.affinity``: the index-th of
the acceptor's usable CPUs, one listed, or none; the worker pins itself after
the fork), its control channel, what
the worker last reported (booted, connections, partitions, bytes) and the
connections handed to it that it has not adopted yet (``handoff``).

* Spawning: a fork per slot.  In the child nothing of the acceptor survives:
  the loop's own state (selector, listener, wakeup pipe, locks, cluster
  session) is closed by the hook the acceptor gives the pool, the other
  workers' channels and the held connections here.
* Messages: ``ready`` makes a worker a candidate for connections, ``took`` /
  ``lost`` settle the oldest connection handed to it, a heartbeat carries its
  figures, ``boot-failed`` its reason.  Any packet counts as a sign of life; a
  packet that is no message is logged (throttled), never fatal.
* Exits (after SIGCHLD): a worker that had booted is restarted, its
  partitions reopened and recovered: at once for the first two exits within
  ``RESTART_WINDOW_S``, then after 0.5 s doubling up to 30 s, but always, so
  that no input can stop the broker by crashing it.  A worker that never
  booted, or exited with ``BOOT_FAILURE_EXIT``, is a boot failure: the pool
  says why and the acceptor stops instead of looping.  A restarted worker
  killed before it said ready is one more crash, not a boot failure.
* Health: a booted worker silent for ``worker.heartbeat.timeout.ms`` is
  killed (SIGKILL; its exit then restarts it).
* Stopping, in two phases: ``drain`` (finish in-flight requests, still
  serving the requests the others forward) until every worker said
  ``drained``, then ``stop``, and SIGKILL for one that outlives the deadline.

The pool owns no loop: it registers the channels in the acceptor's selector
(the slot is the key's data), and the acceptor's loop calls ``readable`` when
one has something, ``reap`` after SIGCHLD, ``restart_due`` and ``kill_silent``
on every turn.
"""

import logging
import math
import os
import selectors
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from hpbroker.acceptor.connection_quotas import ConnectionQuotas
from hpbroker.acceptor.handoff import HandOff
from hpbroker.server import control_channel
from hpbroker.server.config import BrokerConfig
from hpbroker.server.control_channel import BOOT_FAILURE_EXIT, ControlMessageError, Heartbeat, Kind, Moved, Peer
from hpbroker.server.logging_setup import Throttled
from hpbroker.shared.broker_memory import BrokerMemory

log = logging.getLogger(__name__)

RESTART_WINDOW_S = 60.0  # restarts within this long count towards the back-off
MAX_RESTART_DELAY_S = 30.0


@dataclass
class WorkerSlot:
    index: int
    cpu: int | None
    pid: int = 0
    control: socket.socket | None = None
    ready: bool = False  # booted and reachable: a candidate for connections
    booted: bool = False  # said "ready" since it was started
    booted_before: bool = False  # has ever booted: a later death is a crash, not a boot failure
    connections: int = 0
    last_heartbeat: float = 0.0
    restarts: list = field(default_factory=list)  # monotonic times of recent restarts
    restart_at: float = 0.0  # when a dead worker is due to be started again (0: not waiting)
    unacknowledged: deque = field(default_factory=deque)  # connections sent, not yet adopted
    refused_until: float = 0.0  # at its fd limit: no connections until then
    boot_error: str = ""
    exit_code: int | None = None
    partitions: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


class PoolFigures(NamedTuple):
    """Sums over the slots, as the workers last reported them."""
    workers: int
    booted: int
    connections: int
    partitions: int
    bytes_in: int
    bytes_out: int


class WorkerPool:
    def __init__(self, cpus: list[int | None], selector: selectors.BaseSelector, config: Callable[[], BrokerConfig],
                 broker_tag: str, forget_parent_state: Callable[[], None]):
        # one worker per entry: the CPU it pins itself to (None: not pinned)
        self.slots = [WorkerSlot(i, cpu) for i, cpu in enumerate(cpus)]
        self.selector = selector
        self.config = config  # () -> the acceptor's configuration now: a restarted worker gets the reloaded one
        # before any fork: every worker, restarted ones too, maps it
        self.memory = BrokerMemory.create(len(cpus), cluster=bool(config()["zookeeper.connect"]))
        self.broker_tag = broker_tag
        self.forget_parent_state = forget_parent_state  # in a new worker: close what the acceptor's loop holds
        self.cluster_id = ""
        self.handoff = HandOff(self.slots, ConnectionQuotas(config().connection_limits, time.monotonic()))
        self.bad_messages = Throttled(log)

    def __len__(self) -> int:
        return len(self.slots)

    # --- start ---------------------------------------------------------------------
    def start(self, clean_shutdown: bool, cluster_id: str) -> None:
        """Fork every worker; ``clean_shutdown`` tells them whether the last stop was clean."""
        self.cluster_id = cluster_id
        for slot in self.slots:
            self._spawn(slot, clean_shutdown)

    def _spawn(self, slot: WorkerSlot, clean_shutdown: bool) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                parent.close()
                self._forget_in_child()
                from hpbroker.workers.process import run_worker

                code = run_worker(slot.index, len(self.slots), self.config(), child, self.broker_tag,
                                  clean_shutdown, self.cluster_id, slot.cpu, self.memory)
            except BaseException:
                log.exception("worker %d crashed", slot.index)
            finally:
                logging.shutdown()
                os._exit(code)
        child.close()
        parent.setblocking(False)
        slot.pid, slot.control, slot.ready, slot.booted, slot.connections = pid, parent, False, False, 0
        slot.last_heartbeat = time.monotonic()
        self.selector.register(parent, selectors.EVENT_READ, slot)

    def _forget_in_child(self) -> None:
        """In the child: nothing of the acceptor survives the fork."""
        self.forget_parent_state()
        for other in self.slots:
            if other.control is not None:
                other.control.close()
        self.handoff.close_all()  # the acceptor's copies: a worker must not keep connections alive

    # --- what the loop asks ----------------------------------------------------------
    def any_ready(self) -> bool:
        return any(s.ready for s in self.slots)

    def all_booted(self) -> bool:
        return all(s.booted for s in self.slots)

    def figures(self) -> PoolFigures:
        return PoolFigures(len(self.slots), sum(1 for s in self.slots if s.booted),
                           sum(s.connections for s in self.slots), sum(s.partitions for s in self.slots),
                           sum(s.bytes_in for s in self.slots), sum(s.bytes_out for s in self.slots))

    def due_in(self, now: float) -> float:
        """Seconds until the pool has something to do without a message (inf: nothing)."""
        due = [s.restart_at - now for s in self.slots if s.restart_at]
        if self.handoff.waiting:
            due.append(0.02)  # a full channel drains quickly
        return min(due, default=math.inf)

    def broadcast(self, message: bytes) -> dict[int, OSError]:
        """Send ``message`` to every worker with a channel; the failures, by worker index."""
        failed = {}
        for slot in self.slots:
            if slot.control is not None:
                try:
                    slot.control.send(message)
                except OSError as exc:
                    failed[slot.index] = exc
        return failed

    # --- messages ------------------------------------------------------------------
    def readable(self, slot: WorkerSlot) -> None:
        """Take every message waiting on ``slot``'s channel; at its end, close it."""
        while slot.control is not None:
            try:
                data, fds, flags, _ = socket.recv_fds(slot.control, control_channel.MAX_MESSAGE, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds, flags = b"", [], 0
            if fds or flags & socket.MSG_CTRUNC:
                self._moved(slot, data, fds, flags)
                continue
            if not data:
                self.selector.unregister(slot.control)
                slot.control.close()
                slot.control = None
                return
            slot.last_heartbeat = time.monotonic()
            message = self._decode(slot, data)
            if message is None:
                continue
            if message.kind is Kind.TOOK:
                self.handoff.acknowledged(slot, took=True)
            elif message.kind is Kind.LOST:
                self.handoff.acknowledged(slot, took=False)
            elif message.kind is Kind.READY:
                slot.ready = slot.booted = slot.booted_before = True
                self.handoff.flush()
            elif message.kind is Kind.CLOSED:
                slot.connections = max(0, slot.connections - 1)
                self.handoff.closed(slot, cast(Peer, message.payload))
            elif message.kind is Kind.HEARTBEAT:
                # the payload a kind carries is checked by control_channel.decode
                slot.connections, slot.partitions, slot.bytes_in, slot.bytes_out = cast(Heartbeat, message.payload)
            elif message.kind is Kind.BOOT_FAILED:
                slot.boot_error = cast(str, message.payload)
            else:
                self.bad_messages.log(logging.WARNING, ("kind", slot.index), "ignoring a %s message from worker %d: "
                                      "it is the acceptor's to send", message.kind.value, slot.index)

    def _moved(self, slot: WorkerSlot, data: bytes, fds: list[int], flags: int) -> None:
        """A worker hands back a client connection for the worker its requests go to."""
        message = self._decode(slot, data)
        if message is None or message.kind is not Kind.MOVE or len(fds) != 1 or flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            self.bad_messages.log(logging.WARNING, ("move", slot.index), "worker %d sent a descriptor that was no "
                                  "move (or the acceptor is at its file-descriptor limit): that connection closes",
                                  slot.index)
            return
        from hpbroker.server import metrics

        metrics.CONNECTIONS_MOVED.inc()
        moved = cast(Moved, message.payload)
        log.debug("worker %d hands a connection to worker %d", slot.index, moved.worker)
        self.handoff.give(socket.socket(fileno=fds[0]), moved.peer, to=moved.worker)

    def _decode(self, slot: WorkerSlot, data: bytes) -> control_channel.Message | None:
        """The message a worker sent, or None (logged) when it is no message."""
        try:
            return control_channel.decode(data)
        except ControlMessageError as exc:
            self.bad_messages.log(logging.WARNING, ("malformed", slot.index), "ignoring a message from worker %d: %s",
                                  slot.index, exc)
            return None

    # --- exits and restarts ----------------------------------------------------------
    def reap(self, stopping: bool) -> str:
        """After SIGCHLD: collect every worker that exited.  Unless ``stopping``,
        each that had booted is due for a restart; one that could not boot stops
        the broker: its reason is returned (else "") and no later exit counts."""
        failure = ""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return failure
            if pid == 0:
                return failure
            slot = next((s for s in self.slots if s.pid == pid), None)
            if slot is not None:
                failure = self._exited(slot, os.waitstatus_to_exitcode(status), stopping or bool(failure)) or failure

    def _exited(self, slot: WorkerSlot, code: int, stopping: bool) -> str:
        if slot.control is not None:
            self.readable(slot)  # a boot-failed reason (or acknowledgements) may still be queued
        if slot.control is not None:
            self.selector.unregister(slot.control)
            slot.control.close()
        from hpbroker.server import metrics

        metrics.mark_dead(slot.pid)  # its gauges (connections, offsets) no longer count
        self.memory.partitions.revoke_lease(slot.index)  # nobody answers for its leaders from the table now
        slot.pid, slot.control, slot.ready, slot.booted, slot.exit_code = 0, None, False, False, code
        self.handoff.worker_gone(slot)
        if stopping:
            return ""
        # Only a first boot that fails, or a worker saying it could not boot,
        # stops the broker: a restarted worker killed before it reported ready
        # is one more crash, restarted with the back-off.
        if code == BOOT_FAILURE_EXIT or not slot.booted_before:
            reason = slot.boot_error or f"exit code {code}"
            log.error("worker %d could not boot (%s); stopping the broker", slot.index, reason)
            return f"worker {slot.index} could not boot: {reason}"
        now = time.monotonic()
        slot.restarts = [t for t in slot.restarts if now - t < RESTART_WINDOW_S] + [now]
        delay = restart_delay(len(slot.restarts))
        slot.restart_at = now + delay
        log.warning("worker %d exited (%s); restarting it%s; its partitions will be recovered", slot.index,
                    f"signal {-code}" if code < 0 else f"code {code}",
                    f" in {delay:.1f} s ({len(slot.restarts)} exits within {RESTART_WINDOW_S:.0f} s)" if delay else "")
        return ""

    def restart_due(self, now: float) -> None:
        """Start again the workers whose back-off is over (the loop asks only while not stopping)."""
        for slot in self.slots:
            if slot.restart_at and now >= slot.restart_at and not slot.pid:
                slot.restart_at = 0.0
                from hpbroker.server import metrics

                metrics.WORKER_RESTARTS.inc()
                try:
                    self._spawn(slot, clean_shutdown=False)
                except OSError as exc:  # no descriptors for its channel, fork refused: try again soon
                    log.error("could not start worker %d again: %s; retrying in 1 s", slot.index, exc.strerror)
                    slot.restart_at = now + 1.0

    def kill_silent(self, now: float, timeout_s: float) -> bool:
        """SIGKILL every booted worker whose last sign of life is older than
        ``timeout_s`` (its exit restarts it); True when none was."""
        healthy = True
        for slot in self.slots:
            if slot.pid and slot.booted and now - slot.last_heartbeat > timeout_s:
                log.error("worker %d (pid %d) missed heartbeats for %.0f s; killing it", slot.index, slot.pid,
                          now - slot.last_heartbeat)
                _kill(slot.pid, signal.SIGKILL)
                healthy = False
        return healthy

    # --- stop ----------------------------------------------------------------------
    def drain(self, deadline: float) -> None:
        """Ask every worker to finish its in-flight requests and wait until all
        say so (or die, or time runs out): only then do they close the channel
        they forward each other's requests over."""
        waiting = {}
        for slot in self.slots:
            if slot.control is not None and slot.pid:
                try:
                    slot.control.send(control_channel.encode(Kind.DRAIN))
                    waiting[slot.control] = slot
                except OSError:
                    pass
        with selectors.DefaultSelector() as channels:  # select.select fails on descriptors above 1023
            for sock in waiting:
                channels.register(sock, selectors.EVENT_READ)
            while waiting and time.monotonic() < deadline:
                for key, _ in channels.select(max(0.0, deadline - time.monotonic())):
                    sock = cast(socket.socket, key.fileobj)
                    try:
                        data = sock.recv(control_channel.MAX_MESSAGE)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        message = self._decode(waiting[sock], data)
                        if message is None or message.kind is not Kind.DRAINED:
                            continue  # anything else a draining worker says no longer matters
                    waiting.pop(sock, None)
                    channels.unregister(sock)

    def stop(self, deadline: float) -> bool:
        """Tell every worker to stop, wait for each until ``deadline`` (then
        SIGKILL it), and close the connections none adopted.  True when every
        worker, the dead ones included, exited with 0."""
        self.broadcast(control_channel.encode(Kind.STOP))
        codes = []
        for slot in self.slots:
            if not slot.pid:
                codes.append(slot.exit_code)
                continue
            code = _wait(slot.pid, deadline)
            if code is None:
                log.error("worker %d did not stop in time; killing it", slot.index)
                _kill(slot.pid, signal.SIGKILL)
                code = _wait(slot.pid, time.monotonic() + 5)
            codes.append(code)
        self.handoff.close_all()
        return all(c == 0 for c in codes)


def restart_delay(exits_in_window: int) -> float:
    """How long a worker that keeps dying waits before its next start: at
    once for the first two exits in the window, then 0.5 s doubling to 30 s."""
    if exits_in_window <= 2:
        return 0.0
    return min(MAX_RESTART_DELAY_S, 0.5 * 2 ** (exits_in_window - 3))


def _wait(pid: int, deadline: float) -> int | None:
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
