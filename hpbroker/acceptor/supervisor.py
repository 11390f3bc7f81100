"""The acceptor: binds the listener, forks the pinned workers, hands each
accepted socket to the least-loaded one (SCM_RIGHTS), and supervises them.

It never reads a client byte.  It holds the log directories' locks and their
clean-shutdown markers: the markers are consumed at start (the workers learn
whether the last stop was clean) and written again only after every worker
stopped cleanly.

Signals only enqueue (their handlers append to a list and the wakeup fd wakes
the loop); the loop dispatches to ``handle_<signal>``:

* SIGTERM / SIGINT: stop accepting, tell the workers to finish their in-flight
  requests, flush and write checkpoints; then write the markers and exit 0;
* SIGCHLD: reap; a worker that died after booting is restarted (its
  partitions are reopened and recovered), at once the first times and then
  after a growing back-off, but always: a crash caused by input must not be
  able to stop the broker.  One that could not boot stops the broker with its
  reason instead of looping;
* SIGHUP: reread the configuration and hand the workers what can change
  live (the log settings: retention, flush, roll, ...); settings that shape the
  process tree (listeners, log.dirs, num.workers, ...) are reported as needing
  a restart.

Connections are accepted only while some worker is ready: before that (and
while every worker restarts) they wait in the kernel's listen backlog, so a
client connecting the moment the port opens is answered, not closed.  Each
accepted connection reaches a worker through ``handoff``, which keeps it until
the worker has adopted it.  At the file-descriptor limit accepting pauses
briefly (connections wait in the backlog) instead of failing in a loop.

Under systemd (``Type=notify``) it reports READY=1 once every worker booted
(recovery included), a STATUS= line with live figures, WATCHDOG=1 while the
workers answer their heartbeats, RELOADING=1 / STOPPING=1 around reloads and
stops.
"""

import errno
import gc
import logging
import os
import resource
import selectors
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field

from hpbroker.acceptor import membership
from hpbroker.acceptor.handoff import HandOff
from hpbroker.acceptor.metrics_http import MetricsEndpoint
from hpbroker.acceptor.notify import Notifier
from hpbroker.cluster.member import ClusterJoinError
from hpbroker.server import control_channel, metrics_dir
from hpbroker.server.config import BrokerConfig, parse_listener
from hpbroker.server.control_channel import BOOT_FAILURE_EXIT, ControlMessageError, Kind
from hpbroker.server.logs import Throttled
from hpbroker.storage.log_dir_roots import LogDirRoots
from hpbroker.storage.config import ConfigError

log = logging.getLogger(__name__)

RESTART_WINDOW_S = 60.0  # restarts within this long count towards the back-off
MAX_RESTART_DELAY_S = 30.0
MAX_HELD_CONNECTIONS = 1024  # accepted but not yet with a worker: beyond, the backlog holds them
ACCEPT_BACKOFF_S = (0.05, 2.0)  # pause after accept() fails for want of descriptors, doubling
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
STATUS_INTERVAL_S = 5.0
# Settings that shape the process tree or the directories: a reload cannot change them.
RESTART_ONLY_KEYS = frozenset({"listeners", "advertised.listeners", "log.dirs", "log.dir", "broker.id", "node.id",
                               "num.workers", "zookeeper.connect", "socket.request.max.bytes"})


class BrokerStartError(Exception):
    """The broker could not start; the message says why in one line."""


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


def systemd_listener() -> socket.socket | None:
    """The socket systemd passed us (socket activation), if any."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or int(os.environ.get("LISTEN_FDS", "0")) < 1:
        return None
    return socket.socket(fileno=3)


def bind_listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BrokerStartError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(1024)
    return sock


class Supervisor:
    def __init__(self, config: BrokerConfig, reload_config=None):
        self.config = config
        self.reload_config = reload_config  # () -> BrokerConfig from the same sources, for SIGHUP
        self.notifier = Notifier()
        self.announced_ready = False
        self.last_watchdog = self.last_status = 0.0
        self.last_totals = (0, 0, time.monotonic())
        self.selector = selectors.DefaultSelector()
        self.pending_signals: list[int] = []
        self.stopping = False
        self.exit_code = 0
        self.boot_failure = ""
        cpus = sorted(os.sched_getaffinity(0))
        n = config.num_workers
        self.slots = [WorkerSlot(i, cpus[i % len(cpus)] if cpus else None) for i in range(n)]
        self.broker_tag = f"{os.getpid()}"
        self.handoff = HandOff(self.slots)
        self.accepting = False  # the listener is in the selector
        self.scraping = False  # the metrics listener is in the selector
        self.accept_paused_until = 0.0
        self.accept_backoff = ACCEPT_BACKOFF_S[0]
        self.accept_failures = 0  # in the current episode of descriptor exhaustion
        self.bad_messages = Throttled(log)
        self.member = None  # cluster mode: this broker's membership (registration, controller candidacy)
        self.hand_over: membership.HandOver | None = None

    # --- start -------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        raise_nofile_limit()
        self.root = LogDirRoots(cfg.log_dirs, broker_id=cfg.broker_id)
        try:
            _warm_up_kernels()  # before the ZooKeeper session opens: a cold compile takes seconds
            if cfg["zookeeper.connect"]:
                self._join_cluster()
            self.clean = self.root.open()
        except OSError as exc:
            self._leave_cluster()
            raise BrokerStartError(f"cannot use log dir {exc.filename}: {exc.strerror}") from None
        except Exception as exc:
            self._leave_cluster()
            raise BrokerStartError(str(exc)) from None
        self.cluster_id = self.root.cluster_id
        try:
            self._start_serving()
        except BaseException:
            self._leave_cluster()
            self.root.unlock()
            raise

    def _start_serving(self) -> None:
        cfg = self.config
        listener = cfg.listener
        self.listener = systemd_listener() or bind_listener(listener.host, listener.port)
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()
        self.metrics_path = metrics_dir.prepare()  # before anything imports prometheus-client
        self.metrics_endpoint = None
        if cfg["metrics.listen"]:
            where = parse_listener(cfg["metrics.listen"])
            try:
                self.metrics_endpoint = MetricsEndpoint(where.host, where.port)
            except OSError as exc:
                raise BrokerStartError(f"cannot serve metrics on {where.host}:{where.port}: {exc.strerror}") from None
            log.info("metrics at http://%s:%d/metrics", where.host, self.metrics_endpoint.address[1])
        import hpbroker.workers.process  # noqa: F401  (and the handlers, protocol, kio: loaded once, before forking)
        # Everything loaded so far (numba, kio, ...) lives as long as the process:
        # keep the collector from walking it (a full pass took ~20-40 ms, a
        # latency spike), and keep its pages shared with the forked workers.
        gc.collect()
        gc.freeze()
        self._install_signals()
        for slot in self.slots:
            self._spawn(slot, clean_shutdown=self.clean)
        log.info("hpbroker listening on %s:%d with %d workers (cluster %s), data in %s",
                 self.address[0], self.address[1], len(self.slots), self.cluster_id, ", ".join(cfg.log_dirs))

    def _join_cluster(self) -> None:
        """Cluster mode: lock the directories, join with the ids they record,
        and open them with the ids the cluster settled (a generated broker id,
        ZooKeeper's cluster id).  The workers see the broker id through the config."""
        self.root.lock()
        stored_broker_id, stored_cluster_id = self.root.stored_ids()
        try:
            self.member = membership.join(self.config, stored_broker_id, stored_cluster_id)
        except ClusterJoinError as exc:
            self.root.unlock()
            raise BrokerStartError(str(exc)) from None
        self.config = BrokerConfig.from_sources(overrides={**self.config.props,
                                                           "broker.id": str(self.member.broker_id)})
        if self.reload_config is not None:
            self.reload_config = _keeping_broker_id(self.reload_config, self.member.broker_id)
        self.root.broker_id, self.root.cluster_id = self.member.broker_id, self.member.cluster_id

    def _leave_cluster(self) -> None:
        if self.member is not None:
            self.member.close()  # the registration vanishes now, not after the session timeout
            self.member = None

    def _install_signals(self) -> None:
        self.wakeup_r, self.wakeup_w = os.pipe()
        os.set_blocking(self.wakeup_r, False)
        os.set_blocking(self.wakeup_w, False)
        signal.set_wakeup_fd(self.wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self._enqueue_signal)
        self.selector.register(self.wakeup_r, selectors.EVENT_READ, "signal")

    def _enqueue_signal(self, signum, _frame) -> None:
        self.pending_signals.append(signum)

    def _spawn(self, slot: WorkerSlot, clean_shutdown: bool) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                parent.close()
                self._forget_parent_state()
                from hpbroker.workers.process import run_worker

                code = run_worker(slot.index, len(self.slots), self.config, child, self.broker_tag,
                                  clean_shutdown, self.cluster_id, slot.cpu)
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

    def _forget_parent_state(self) -> None:
        """In the child: nothing of the acceptor's loop survives the fork."""
        signal.set_wakeup_fd(-1)
        for key in list(self.selector.get_map().values()):
            if key.data == "metrics-client":
                key.fileobj.close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.sock.close()
        self.selector.close()
        self.listener.close()
        os.close(self.wakeup_r)
        os.close(self.wakeup_w)
        for other in self.slots:
            if other.control is not None:
                other.control.close()
        self.root.unlock()  # this process's copies: the acceptor keeps the directory locks
        self.handoff.close_all()  # the acceptor's copies: a worker must not keep connections alive
        # The cluster member's kazoo client is the acceptor's: its threads did not
        # survive the fork and its locks may have been held at that moment, so a
        # worker never uses it (it opens its own session).  Its atexit hook does
        # not run either: a worker ends with os._exit.
        self.member = self.hand_over = None

    # --- the loop ------------------------------------------------------------------
    def run(self) -> int:
        timeout_s = self.config["worker.heartbeat.timeout.ms"] / 1000
        while True:
            self._update_accepting(time.monotonic())
            for key, _ in self.selector.select(timeout=self._select_timeout()):
                if key.data == "accept":
                    self._accept()
                elif key.data == "metrics":
                    try:
                        for conn in self.metrics_endpoint.accept():
                            self.selector.register(conn, selectors.EVENT_READ, "metrics-client")
                    except OSError as exc:
                        if exc.errno not in _OUT_OF_DESCRIPTORS:
                            raise
                        self._pause_accepting(exc)
                elif key.data == "metrics-client":
                    if self.metrics_endpoint.readable(key.fileobj):
                        self.selector.unregister(key.fileobj)
                        key.fileobj.close()
                elif key.data == "signal":
                    self._drain_wakeup()
                else:
                    self._on_worker_message(key.data)
            while self.pending_signals:
                signum = self.pending_signals.pop(0)
                getattr(self, f"handle_{signal.Signals(signum).name.lower()}")()
            if self.hand_over is not None and self.hand_over.finished and not self.stopping:
                self.handle_sigterm()
            if self.stopping:
                return self._finish_stop()
            now = time.monotonic()
            self.handoff.flush()  # connections that waited for a worker's channel
            self._restart_due(now)
            healthy = True
            for slot in self.slots:
                if slot.pid and slot.booted and now - slot.last_heartbeat > timeout_s:
                    log.error("worker %d (pid %d) missed heartbeats for %.0f s; killing it", slot.index, slot.pid,
                              now - slot.last_heartbeat)
                    _kill(slot.pid, signal.SIGKILL)
                    healthy = False
            self._report(now, healthy)

    def _report(self, now: float, healthy: bool) -> None:
        """sd_notify: READY once all workers booted, then status and watchdog."""
        if not self.announced_ready and all(s.booted for s in self.slots):
            self.announced_ready = True
            self.notifier.ready(self.status_line(now))
            log.info("ready: %d workers serving", len(self.slots))
        if not self.announced_ready:
            return
        if self.notifier.watchdog_s and healthy and now - self.last_watchdog >= self.notifier.watchdog_s / 2:
            self.last_watchdog = now
            self.notifier.watchdog()
        if now - self.last_status >= STATUS_INTERVAL_S:
            self.last_status = now
            self.notifier.status(self.status_line(now))

    def status_line(self, now: float) -> str:
        ready = sum(1 for s in self.slots if s.booted)
        total_in = sum(s.bytes_in for s in self.slots)
        total_out = sum(s.bytes_out for s in self.slots)
        prev_in, prev_out, prev_t = self.last_totals
        elapsed = max(now - prev_t, 1e-3)
        rate_in, rate_out = max(total_in - prev_in, 0) / elapsed / 1e6, max(total_out - prev_out, 0) / elapsed / 1e6
        self.last_totals = (total_in, total_out, now)
        return (f"{ready}/{len(self.slots)} workers, {sum(s.connections for s in self.slots)} connections, "
                f"{sum(s.partitions for s in self.slots)} partitions, in {rate_in:.1f} MB/s, out {rate_out:.1f} MB/s")

    def _drain_wakeup(self) -> None:
        try:
            while os.read(self.wakeup_r, 512):
                pass
        except BlockingIOError:
            pass

    def _select_timeout(self) -> float:
        now = time.monotonic()
        due = [s.restart_at - now for s in self.slots if s.restart_at]
        if self.handoff.waiting:
            due.append(0.02)  # a full channel drains quickly
        if self.accept_paused_until:
            due.append(self.accept_paused_until - now)
        return max(0.0, min([0.5, *due]))

    def _update_accepting(self, now: float) -> None:
        """Poll the listener only while a worker can take what it accepts, the
        acceptor is not holding too many connections, and accept() is not
        paused for want of descriptors; otherwise clients wait in the backlog."""
        if self.accept_paused_until and now >= self.accept_paused_until:
            self.accept_paused_until = 0.0
        wanted = (not self.stopping and any(s.ready for s in self.slots) and not self.accept_paused_until
                  and self.handoff.held() < MAX_HELD_CONNECTIONS)
        if wanted and not self.accepting:
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        elif self.accepting and not wanted:
            self.selector.unregister(self.listener)
        self.accepting = wanted
        # the metrics listener too pauses while descriptors are short (it would spin as well)
        scrape = self.metrics_endpoint is not None and not self.accept_paused_until and not self.stopping
        if scrape != self.scraping:
            if scrape:
                self.selector.register(self.metrics_endpoint.sock, selectors.EVENT_READ, "metrics")
            else:
                self.selector.unregister(self.metrics_endpoint.sock)
            self.scraping = scrape

    def _accept(self) -> None:
        while self.handoff.held() < MAX_HELD_CONNECTIONS:
            try:
                conn, _addr = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    self._pause_accepting(exc)
                    return
                raise
            if self.accept_failures:
                log.info("accepting connections again (accept() had failed %d times for want of descriptors)",
                         self.accept_failures)
                self.accept_failures, self.accept_backoff = 0, ACCEPT_BACKOFF_S[0]
            self.handoff.give(conn)

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors: stop polling the listener for a while (doubling
        while it lasts) rather than spin on a listener that stays readable."""
        if not self.accept_failures:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.error("accept failed: %s (nofile limit %d); new connections wait in the listen backlog until "
                      "descriptors free up", exc.strerror, soft)
        self.accept_failures += 1
        self.accept_paused_until = time.monotonic() + self.accept_backoff
        self.accept_backoff = min(self.accept_backoff * 2, ACCEPT_BACKOFF_S[1])
        self._update_accepting(time.monotonic())

    def _on_worker_message(self, slot: WorkerSlot) -> None:
        while slot.control is not None:
            try:
                data = slot.control.recv(control_channel.MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
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
            elif message.kind is Kind.HEARTBEAT:
                slot.connections, slot.partitions, slot.bytes_in, slot.bytes_out = message.payload
            elif message.kind is Kind.BOOT_FAILED:
                slot.boot_error = message.payload
            else:
                self.bad_messages.log(logging.WARNING, ("kind", slot.index), "ignoring a %s message from worker %d: "
                                      "it is the acceptor's to send", message.kind.value, slot.index)

    def _decode(self, slot: WorkerSlot, data: bytes) -> control_channel.Message | None:
        """The message a worker sent, or None (logged) when it is no message."""
        try:
            return control_channel.decode(data)
        except ControlMessageError as exc:
            self.bad_messages.log(logging.WARNING, ("malformed", slot.index), "ignoring a message from worker %d: %s",
                                  slot.index, exc)
            return None

    # --- signals -------------------------------------------------------------------
    def handle_sigterm(self) -> None:
        if self.member is not None and self.config["controlled.shutdown.enable"] and self.hand_over is None:
            # leaderships move away first, while the workers keep answering
            timeout_s = membership.shutdown_timeout_s(self.config)
            log.info("stopping: controlled shutdown first (up to %.0f s); a second signal skips it", timeout_s)
            self.notifier.stopping()
            self.hand_over = membership.HandOver(self.member, timeout_s, self._wake_loop)
            return
        if not self.stopping:
            log.info("stopping: no new connections; workers finish in-flight requests and flush")
        self.stopping = True

    def _wake_loop(self) -> None:
        """From the controlled shutdown's thread: the loop looks at ``hand_over`` now."""
        try:
            os.write(self.wakeup_w, b"\0")
        except OSError:
            pass

    handle_sigint = handle_sigterm

    def handle_sighup(self) -> None:
        self.notifier.reloading()
        try:
            if self.reload_config is None:
                raise ConfigError("this broker was started without a reloadable configuration")
            new = self.reload_config()
            new.validate()
        except ConfigError as exc:
            log.error("reload failed, keeping the running settings: %s", exc)
            self.notifier.ready(f"reload failed: {exc}")
            return
        changed = sorted(k for k in set(new.props) | set(self.config.props) if new.props.get(k) != self.config.props.get(k))
        frozen = [k for k in changed if k in RESTART_ONLY_KEYS]
        live = {k: v for k, v in new.props.items() if k not in RESTART_ONLY_KEYS}
        live.update({k: v for k, v in self.config.props.items() if k in RESTART_ONLY_KEYS})
        try:
            message = control_channel.encode(Kind.RELOAD, live)
        except ControlMessageError as exc:
            log.error("reload failed, keeping the running settings: %s", exc)
            self.notifier.ready(f"reload failed: {exc}")
            return
        for slot in self.slots:
            if slot.control is not None:
                try:
                    slot.control.send(message)
                except OSError as exc:
                    log.warning("could not send the reload to worker %d: %s", slot.index, exc)
        self.config = BrokerConfig.from_sources(overrides=live)
        log.info("reloaded: changed %s%s", ", ".join(changed) or "nothing",
                 f"; {', '.join(frozen)} need a restart" if frozen else "")
        self.notifier.ready(self.status_line(time.monotonic()))

    def handle_sigchld(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((s for s in self.slots if s.pid == pid), None)
            if slot is not None:
                self._worker_exited(slot, os.waitstatus_to_exitcode(status))

    def _worker_exited(self, slot: WorkerSlot, code: int) -> None:
        if slot.control is not None:
            self._on_worker_message(slot)  # a boot-failed reason (or acknowledgements) may still be queued
        if slot.control is not None:
            self.selector.unregister(slot.control)
            slot.control.close()
        from hpbroker.server import metrics

        metrics.mark_dead(slot.pid)  # its gauges (connections, offsets) no longer count
        slot.pid, slot.control, slot.ready, slot.booted, slot.exit_code = 0, None, False, False, code
        self.handoff.worker_gone(slot)
        if self.stopping:
            return
        # Only a first boot that fails, or a worker saying it could not boot,
        # stops the broker: a restarted worker killed before it reported ready
        # is one more crash, restarted with the back-off.
        if code == BOOT_FAILURE_EXIT or not slot.booted_before:
            reason = slot.boot_error or f"exit code {code}"
            log.error("worker %d could not boot (%s); stopping the broker", slot.index, reason)
            self.boot_failure = f"worker {slot.index} could not boot: {reason}"
            self.exit_code = 1
            self.stopping = True
            return
        now = time.monotonic()
        slot.restarts = [t for t in slot.restarts if now - t < RESTART_WINDOW_S] + [now]
        delay = restart_delay(len(slot.restarts))
        slot.restart_at = now + delay
        log.warning("worker %d exited (%s); restarting it%s; its partitions will be recovered", slot.index,
                    f"signal {-code}" if code < 0 else f"code {code}",
                    f" in {delay:.1f} s ({len(slot.restarts)} exits within {RESTART_WINDOW_S:.0f} s)" if delay else "")

    def _restart_due(self, now: float) -> None:
        for slot in self.slots:
            if slot.restart_at and now >= slot.restart_at and not slot.pid and not self.stopping:
                slot.restart_at = 0.0
                from hpbroker.server import metrics

                metrics.WORKER_RESTARTS.inc()
                try:
                    self._spawn(slot, clean_shutdown=False)
                except OSError as exc:  # no descriptors for its channel, fork refused: try again soon
                    log.error("could not start worker %d again: %s; retrying in 1 s", slot.index, exc.strerror)
                    slot.restart_at = now + 1.0

    # --- stop ----------------------------------------------------------------------
    def _finish_stop(self) -> int:
        self.notifier.stopping()
        try:
            self.selector.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        deadline = time.monotonic() + self.config["shutdown.timeout.ms"] / 1000
        self._drain_workers(time.monotonic() + self.config["shutdown.timeout.ms"] / 2000)
        for slot in self.slots:
            if slot.control is not None:
                try:
                    slot.control.send(control_channel.encode(Kind.STOP))
                except OSError:
                    pass
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
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        metrics_dir.cleanup(self.metrics_path)
        self._leave_cluster()
        all_clean = all(c == 0 for c in codes) and self.exit_code == 0
        if all_clean:
            self.root.close()
            log.info("stopped cleanly")
        else:
            self.root.unlock()
            log.warning("stopped; not every worker stopped cleanly, the next start recovers")
        return self.exit_code


    def _drain_workers(self, deadline: float) -> None:
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
                    sock = key.fileobj
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


def _keeping_broker_id(load, broker_id: int):
    """``load`` for SIGHUP, with the broker id the cluster settled (stored or
    generated) when the sources set none (or -1): otherwise every reload would
    report broker.id as changed and needing a restart."""
    def reload() -> BrokerConfig:
        new = load()
        if ("broker.id" in new.props or "node.id" in new.props) and new.broker_id >= 0:
            return new
        return BrokerConfig.from_sources(overrides={**new.props, "broker.id": str(broker_id)})
    return reload


def restart_delay(exits_in_window: int) -> float:
    """How long a worker that keeps dying waits before its next start: at
    once for the first two exits in the window, then 0.5 s doubling to 30 s."""
    if exits_in_window <= 2:
        return 0.0
    return min(MAX_RESTART_DELAY_S, 0.5 * 2 ** (exits_in_window - 3))


def raise_nofile_limit() -> None:
    """Raise the soft descriptor limit to the hard one, as brokers want (one
    descriptor per connection and per open segment file)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.info("file descriptor limit (nofile) raised from %d to %d", soft, hard)
        except (ValueError, OSError) as exc:
            log.warning("could not raise the file descriptor limit from %d to %d: %s", soft, hard, exc)


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


def _warm_up_kernels() -> None:
    """Have every numba kernel's machine code before anything time-sensitive
    (joining ZooKeeper, forking the workers, who share it): each kernel compiles
    or loads all its declared signatures on import and can compile nothing
    after, so ``load`` raises here, at start, if one is missing.  Then one call
    of each wrapper over a read-only and a writable buffer (an mmap'd segment,
    a produce request) proves they land on those signatures."""
    import numpy as np

    from hpbroker.kernels import crc32, crc32c, decode_records, plan_index_entries, scan_batches
    from hpbroker.kernels.compile import load
    from hpbroker.records import Record, encode_batch

    load()
    data = encode_batch([Record(0, 0, None, b"")])
    for view in (np.frombuffer(data, np.uint8), np.frombuffer(bytearray(data), np.uint8)):
        scan = scan_batches(view)
        plan_index_entries(scan.position, scan.size, scan.last_offset, scan.max_timestamp, 4096)
        decode_records(view, scan.position + 61, scan.position + scan.size, scan.base_offset, scan.base_timestamp,
                       scan.record_count)
        crc32c(view)
        crc32(view)

