"""The acceptor's loop: binds the listener, hands each accepted socket to the
least-loaded worker (SCM_RIGHTS), and wires the listener, the worker pool,
signals, ``/metrics`` and systemd together.  The workers' lives (forking,
pinning, restarts with back-off, boot failures, heartbeats, the two stop
phases) are ``worker_pool``'s; this module decides when.

It never reads a client byte.  It holds the log directories' locks and their
clean-shutdown markers: the markers are consumed at start (the workers learn
whether the last stop was clean) and written again only after every worker
stopped cleanly.

Signals only enqueue (their handlers append to a list and the wakeup fd wakes
the loop); the loop dispatches to ``handle_<signal>``:

* SIGTERM / SIGINT: stop accepting, tell the workers to finish their in-flight
  requests (``drain``), then to flush and write checkpoints (``stop``); then
  write the markers and exit 0;
* SIGCHLD: the pool reaps; a worker that died after booting is restarted (its
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
import math
import os
import resource
import selectors
import signal
import socket
import time
from typing import cast

from hpbroker.acceptor import membership
from hpbroker.acceptor.metrics_http import MetricsEndpoint
from hpbroker.acceptor.notify import Notifier
from hpbroker.acceptor.worker_pool import WorkerPool
from hpbroker.cluster.member import ClusterJoinError
from hpbroker.server import control_channel, metrics_dir
from hpbroker.server.config import BrokerConfig, Listener, parse_listener
from hpbroker.server.control_channel import ControlMessageError, Kind, Peer
from hpbroker.server.logging_setup import Throttled
from hpbroker.storage.config import ConfigError
from hpbroker.storage.log_dir_roots import LogDirRoots

log = logging.getLogger(__name__)

MAX_HELD_CONNECTIONS = 1024  # accepted but not yet with a worker: beyond, the backlog holds them
ACCEPT_BACKOFF_S = (0.05, 2.0)  # pause after accept() fails for want of descriptors, doubling
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
STATUS_INTERVAL_S = 5.0
# Settings that shape the process tree, the directories or what the listeners are: a reload
# cannot change them.  (A SASL listener's mechanisms and PLAIN users, and a TLS listener's
# keystore and truststore, do change on reload.)
RESTART_ONLY_KEYS = frozenset({"listeners", "advertised.listeners", "log.dirs", "log.dir", "broker.id", "node.id",
                               "num.workers", "worker.cpu.affinity", "zookeeper.connect",
                               "socket.request.max.bytes", "listener.security.protocol.map",
                               "inter.broker.listener.name", "security.inter.broker.protocol",
                               "authorizer.class.name"})


class BrokerStartError(Exception):
    """The broker could not start; the message says why in one line."""


def systemd_sockets() -> list[socket.socket]:
    """The sockets systemd passed us (socket activation), in the unit's order."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return []
    return [socket.socket(fileno=3 + i) for i in range(int(os.environ.get("LISTEN_FDS", "0")))]


def open_listeners(listeners: tuple[Listener, ...]) -> list[socket.socket]:
    """A listening socket per listener, in their order: systemd's when it passed
    one for that port (or passed one and there is one listener), else bound here."""
    passed = systemd_sockets()
    if len(passed) == 1 and len(listeners) == 1:
        return passed
    by_port = {s.getsockname()[1]: s for s in passed if s.family in (socket.AF_INET, socket.AF_INET6)}
    found = [by_port.pop(listener.port, None) or bind_listener(listener.host, listener.port)
             for listener in listeners]
    for unused in by_port.values():
        log.warning("systemd passed a socket on port %d that no listener has; closing it", unused.getsockname()[1])
        unused.close()
    return found


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
        self.pool = WorkerPool(config.worker_cpus, self.selector, lambda: self.config, f"{os.getpid()}",
                               self._forget_parent_state)
        self.accepting: set[socket.socket] = set()  # the listeners in the selector
        self.accept_resume_at = math.inf  # when a listener held by a connection rate may accept again
        self._quota_notes = Throttled(log)  # a listener held by a quota, an address refused: once a minute
        self.scraping = False  # the metrics listener is in the selector
        self.accept_paused_until = 0.0
        self.accept_backoff = ACCEPT_BACKOFF_S[0]
        self.accept_failures = 0  # in the current episode of descriptor exhaustion
        self.member = None  # cluster mode: this broker's membership (registration, controller candidacy)
        self.hand_over: membership.HandOver | None = None
        self.lent = None  # cluster mode: the session as the workers see it (the board, the proxy)

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
        assert self.root.cluster_id is not None  # open() settled it
        self.cluster_id = self.root.cluster_id
        try:
            self._start_serving()
        except BaseException:
            self._leave_cluster()
            self.root.unlock()
            raise

    def _start_serving(self) -> None:
        cfg = self.config
        self.listeners = open_listeners(cfg.listeners)
        self.listener_names = {sock: listener.name for sock, listener in zip(self.listeners, cfg.listeners)}
        for sock in self.listeners:
            sock.setblocking(False)
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
        if self.member is not None:
            assert self.pool.memory.board is not None  # the pool made one: cluster mode
            self.lent = membership.lend_session(self.member, self.config, self.pool.memory.board, self.pool.broker_tag)
        self.pool.start(self.clean, self.cluster_id)
        log.info("hpbroker listening on %s with %d workers (cluster %s), data in %s", self._where(), len(self.pool),
                 self.cluster_id, ", ".join(cfg.log_dirs))

    def _where(self) -> str:
        """``host:port``, or with several listeners each as ``NAME host:port``."""
        addresses = ["%s:%d" % sock.getsockname()[:2] for sock in self.listeners]
        if len(addresses) == 1:
            return addresses[0]
        return ", ".join(f"{listener.name} {address}" for listener, address in zip(self.config.listeners, addresses))

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
        if self.lent is not None:
            self.lent.close()
            self.lent = None
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

    def _forget_parent_state(self) -> None:
        """In a new worker (the pool closes the other workers' channels and the
        held connections): nothing of the acceptor's loop survives the fork."""
        signal.set_wakeup_fd(-1)
        for key in list(self.selector.get_map().values()):
            if key.data == "metrics-client":
                cast(socket.socket, key.fileobj).close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.sock.close()
        self.selector.close()
        for sock in self.listeners:
            sock.close()
        os.close(self.wakeup_r)
        os.close(self.wakeup_w)
        self.root.unlock()  # this process's copies: the acceptor keeps the directory locks
        # The cluster member's kazoo client is the acceptor's: its threads did not
        # survive the fork and its locks may have been held at that moment, so a
        # worker never uses it (it reads the board and asks the proxy).  Its
        # atexit hook does not run either: a worker ends with os._exit.
        if self.lent is not None:
            self.lent.close_in_child()
        self.member = self.hand_over = self.lent = None

    # --- the loop ------------------------------------------------------------------
    def run(self) -> int:
        timeout_s = self.config["worker.heartbeat.timeout.ms"] / 1000
        while True:
            self._update_accepting(time.monotonic())
            for key, _ in self.selector.select(timeout=self._select_timeout()):
                if key.data == "accept":
                    self._accept(cast(socket.socket, key.fileobj))
                elif key.data == "metrics":
                    assert self.metrics_endpoint is not None  # registered only when there is one
                    try:
                        for conn in self.metrics_endpoint.accept():
                            self.selector.register(conn, selectors.EVENT_READ, "metrics-client")
                    except OSError as exc:
                        if exc.errno not in _OUT_OF_DESCRIPTORS:
                            raise
                        self._pause_accepting(exc)
                elif key.data == "metrics-client":
                    assert self.metrics_endpoint is not None
                    client = cast(socket.socket, key.fileobj)
                    if self.metrics_endpoint.readable(client):
                        self.selector.unregister(client)
                        client.close()
                elif key.data == "signal":
                    self._drain_wakeup()
                else:
                    self.pool.readable(key.data)
            while self.pending_signals:
                signum = self.pending_signals.pop(0)
                getattr(self, f"handle_{signal.Signals(signum).name.lower()}")()
            if self.hand_over is not None and self.hand_over.finished and not self.stopping:
                self.handle_sigterm()
            if self.stopping:
                return self._finish_stop()
            now = time.monotonic()
            self.pool.handoff.flush()  # connections that waited for a worker's channel
            self.pool.restart_due(now)
            self._report(now, self.pool.kill_silent(now, timeout_s))

    def _report(self, now: float, healthy: bool) -> None:
        """sd_notify: READY once all workers booted, then status and watchdog."""
        if not self.announced_ready and self.pool.all_booted():
            self.announced_ready = True
            self.notifier.ready(self.status_line(now))
            log.info("ready: %d workers serving", len(self.pool))
        if not self.announced_ready:
            return
        if self.notifier.watchdog_s and healthy and now - self.last_watchdog >= self.notifier.watchdog_s / 2:
            self.last_watchdog = now
            self.notifier.watchdog()
        if now - self.last_status >= STATUS_INTERVAL_S:
            self.last_status = now
            self.notifier.status(self.status_line(now))

    def status_line(self, now: float) -> str:
        f = self.pool.figures()
        prev_in, prev_out, prev_t = self.last_totals
        elapsed = max(now - prev_t, 1e-3)
        rate_in, rate_out = max(f.bytes_in - prev_in, 0) / elapsed / 1e6, max(f.bytes_out - prev_out, 0) / elapsed / 1e6
        self.last_totals = (f.bytes_in, f.bytes_out, now)
        return (f"{f.booted}/{f.workers} workers, {f.connections} connections, "
                f"{f.partitions} partitions, in {rate_in:.1f} MB/s, out {rate_out:.1f} MB/s")

    def _drain_wakeup(self) -> None:
        try:
            while os.read(self.wakeup_r, 512):
                pass
        except BlockingIOError:
            pass

    def _select_timeout(self) -> float:
        now = time.monotonic()
        due = [self.pool.due_in(now)]
        if self.accept_paused_until:
            due.append(self.accept_paused_until - now)
        if self.accept_resume_at < math.inf:
            due.append(self.accept_resume_at - now)
        return max(0.0, min([0.5, *due]))

    def _update_accepting(self, now: float) -> None:
        """Poll a listener only while a worker can take what it accepts, the
        acceptor is not holding too many connections, accept() is not paused
        for want of descriptors, and the connection quotas let that listener
        accept; otherwise clients wait in its backlog."""
        if self.accept_paused_until and now >= self.accept_paused_until:
            self.accept_paused_until = 0.0
        wanted = (not self.stopping and self.pool.any_ready() and not self.accept_paused_until
                  and self.pool.handoff.held() < MAX_HELD_CONNECTIONS)
        self.accept_resume_at = math.inf
        for sock, name in self.listener_names.items():
            wait = self._quota_wait(name, now) if wanted else 0.0
            if 0 < wait < math.inf:
                self.accept_resume_at = min(self.accept_resume_at, now + wait)
            if wanted and not wait and sock not in self.accepting:
                self.selector.register(sock, selectors.EVENT_READ, "accept")
                self.accepting.add(sock)
            elif sock in self.accepting and not (wanted and not wait):
                self.selector.unregister(sock)
                self.accepting.discard(sock)
        # the metrics listener too pauses while descriptors are short (it would spin as well)
        endpoint = self.metrics_endpoint
        scrape = endpoint is not None and not self.accept_paused_until and not self.stopping
        if endpoint is not None and scrape != self.scraping:
            if scrape:
                self.selector.register(endpoint.sock, selectors.EVENT_READ, "metrics")
            else:
                self.selector.unregister(endpoint.sock)
            self.scraping = scrape

    def _quota_wait(self, listener: str, now: float) -> float:
        """Seconds until ``listener`` may accept again under the connection quotas (inf: until one closes)."""
        wait = self.pool.handoff.quotas.accept_wait(listener, now)
        if wait == math.inf:
            self._quota_notes.log(logging.WARNING, ("full", listener), "listener %s is at its connection limit "
                                  "(max.connections): new connections wait in its backlog until one closes",
                                  listener)
        elif wait:
            self._quota_notes.log(logging.INFO, ("rate", listener), "listener %s is at its connection creation rate "
                                  "(max.connection.creation.rate): new connections wait in its backlog", listener)
        return wait

    def _accept(self, listener: socket.socket) -> None:
        name = self.listener_names[listener]
        quotas = self.pool.handoff.quotas
        while self.pool.handoff.held() < MAX_HELD_CONNECTIONS and not quotas.accept_wait(name, time.monotonic()):
            try:
                conn, addr = listener.accept()
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
            quotas.accepted(name, time.monotonic())
            ip = str(addr[0])
            if ip.startswith("::ffff:") and "." in ip:  # an IPv4 client on a dual-stack socket
                ip = ip.removeprefix("::ffff:")
            if quotas.ip_full(ip):  # as Kafka does: accepted, and closed at once
                conn.close()
                self._quota_notes.log(logging.WARNING, ("ip", ip), "refused a connection from %s on %s: it has %d, "
                                      "its limit (max.connections.per.ip or its override)", ip, name,
                                      quotas.ip_limit(ip))
                continue
            self.pool.handoff.give(conn, Peer(ip, name))

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
        changed = sorted(k for k in set(new.props) | set(self.config.props)
                         if new.props.get(k) != self.config.props.get(k))
        frozen = [k for k in changed if k in RESTART_ONLY_KEYS]
        live = {k: v for k, v in new.props.items() if k not in RESTART_ONLY_KEYS}
        live.update({k: v for k, v in self.config.props.items() if k in RESTART_ONLY_KEYS})
        try:
            message = control_channel.encode(Kind.RELOAD, live)
        except ControlMessageError as exc:
            log.error("reload failed, keeping the running settings: %s", exc)
            self.notifier.ready(f"reload failed: {exc}")
            return
        self.pool.handoff.quotas.configure(new.connection_limits, time.monotonic())
        for index, exc in self.pool.broadcast(message).items():
            log.warning("could not send the reload to worker %d: %s", index, exc)
        self.config = BrokerConfig.from_sources(overrides=live)
        log.info("reloaded: changed %s%s", ", ".join(changed) or "nothing",
                 f"; {', '.join(frozen)} need a restart" if frozen else "")
        self.notifier.ready(self.status_line(time.monotonic()))

    def handle_sigchld(self) -> None:
        failure = self.pool.reap(self.stopping)
        if failure:  # the pool logged it
            self.boot_failure = failure
            self.exit_code = 1
            self.stopping = True

    # --- stop ----------------------------------------------------------------------
    def _finish_stop(self) -> int:
        self.notifier.stopping()
        for sock in self.listeners:
            try:
                self.selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        deadline = time.monotonic() + self.config["shutdown.timeout.ms"] / 1000
        self.pool.drain(time.monotonic() + self.config["shutdown.timeout.ms"] / 2000)
        workers_clean = self.pool.stop(deadline)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        metrics_dir.cleanup(self.metrics_path)
        self._leave_cluster()
        all_clean = workers_clean and self.exit_code == 0
        if all_clean:
            self.root.close()
            log.info("stopped cleanly")
        else:
            self.root.unlock()
            log.warning("stopped; not every worker stopped cleanly, the next start recovers")
        return self.exit_code


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

