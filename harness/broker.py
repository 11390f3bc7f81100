"""Run the real broker (``python -m hpbroker serve``) as a subprocess for tests
and benchmarks.

Readiness is a condition, not a delay: the acceptor accepts TCP as soon as it
has bound, but only a booted worker answers, so we poll a Metadata v0 request
until it names our port, and then wait until every worker has logged that it
is up (the kill tests need to know which pid serves which index).
"""

import os
import re
import resource
import signal
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path

from harness.netns import entered
from harness.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0

# "... [<pid>] hpbroker.workers.process: worker <index> up on CPU ..."
_WORKER_UP = re.compile(r"\[(\d+)\] [\w.]+: worker (\d+) up on CPU")


class BrokerError(AssertionError):
    pass


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nobody listens on right now (the broker binds it next;
    a clash with another process is possible but rare, and start() reports
    it plainly).  Never one this process handed out before: brokers made
    together bind theirs only later, and the kernel may offer a port twice
    meanwhile (a cluster's third broker once got its second's)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _request(s: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    """One request with a v1 header (client id "ping"), and its answer after the correlation id."""
    frame = struct.pack(">hhih", api_key, version, 7, 4) + b"ping" + body
    s.sendall(struct.pack(">i", len(frame)) + frame)
    return recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])[4:]


def plain_login(s: socket.socket, user: str, password: str) -> bool:
    """SASL PLAIN on a connection: SaslHandshake v1, one SaslAuthenticate v0; True when accepted."""
    mechanism = b"PLAIN"
    answer = _request(s, 17, 1, struct.pack(">h", len(mechanism)) + mechanism)
    if struct.unpack_from(">h", answer)[0] != 0:
        return False
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    answer = _request(s, 36, 0, struct.pack(">i", len(token)) + token)
    return struct.unpack_from(">h", answer)[0] == 0


def metadata_ping(host: str, port: int, timeout: float = 2.0, login: tuple[str, str] | None = None,
                  tls: ssl.SSLContext | None = None) -> bool:
    """One Metadata v0 request (all topics) on a fresh connection (over TLS
    with ``tls``, logged in first with ``login``'s user and password, PLAIN, on
    a SASL listener); True when the answer is well formed and advertises
    ``port`` (among a cluster's brokers)."""
    body = struct.pack(">hhih", 3, 0, 7, 4) + b"ping" + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as plain:
            s = plain if tls is None else tls.wrap_socket(plain, server_hostname=host)
            if login is not None and not plain_login(s, *login):
                return False
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            data = recv_exact(s, size)
    except (OSError, EOFError):
        return False
    correlation, brokers = struct.unpack_from(">ii", data, 0)
    if correlation != 7 or brokers < 1:
        return False
    pos = 8
    for _ in range(brokers):  # a cluster's brokers are all listed; ours among them
        (host_len,) = struct.unpack_from(">h", data, pos + 4)
        (advertised_port,) = struct.unpack_from(">i", data, pos + 6 + host_len)
        if advertised_port == port:
            return True
        pos += 10 + host_len
    return False


def recv_exact(s: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = s.recv(n - got)
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def children(pid: int) -> set[int]:
    """Direct children of ``pid`` from /proc (no psutil)."""
    found = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(x) for x in f.read().split())
        return found
    except FileNotFoundError:
        pass
    except OSError:
        # kernels without CONFIG_PROC_CHILDREN: scan every process's parent
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _stat_fields(int(entry))
                if fields is not None and int(fields[1]) == pid:  # field 4, the parent
                    found.add(int(entry))
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (``[0]`` is field 3,
    the state); None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def cpu_times(pid: int, reaped_children: bool = False) -> tuple[float, float]:
    """(user, system) seconds of one process ((0, 0) if it is gone); with
    ``reaped_children`` also cutime / cstime, the time of children it has waited for."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0, 0.0
    # utime, stime, cutime, cstime are fields 14-17
    user, system = int(fields[11]), int(fields[12])
    if reaped_children:
        user, system = user + int(fields[13]), system + int(fields[14])
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    return sum(cpu_times(pid, reaped_children))


def minor_faults(pid: int, reaped_children: bool = False) -> int:
    """Minor page faults of one process (0 if it is gone): pages it touched for
    the first time; with ``reaped_children`` also those of children it has waited for."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0
    # minflt, cminflt are fields 10 and 11
    return int(fields[7]) + (int(fields[8]) if reaped_children else 0)


class Broker:
    """One hpbroker process tree: the acceptor and its workers."""

    def __init__(self, data_dir, log_path=None, overrides: dict | None = None, port: int | None = None,
                 num_workers: int | None = None, nofile: int | None = None, host: str | None = None,
                 netns: str | None = None, login: tuple[str, str] | None = None, config=None,
                 tls: ssl.SSLContext | None = None):
        """``host`` is the address to listen on and advertise (127.0.0.1 unless
        given); ``netns`` a network namespace (a name under /var/run/netns, such as
        a tests/cluster/netlab.py host's) to run the broker in, through
        ``ip netns exec``: its readiness check then runs in that namespace too."""
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"{self.data_dir.name}.stderr.log"
        self.overrides = dict(overrides or {})
        if num_workers is not None:
            self.overrides["num.workers"] = str(num_workers)
        self.num_workers = int(self.overrides.get("num.workers", len(os.sched_getaffinity(0))))
        self.port = port or free_port()
        self.host = host or "127.0.0.1"
        self.netns = netns
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self.nofile = nofile  # soft and hard RLIMIT_NOFILE of the broker, if set
        self.login = login  # a PLAIN user and password, when the listener asks for a SASL login
        self.tls = tls  # a client context trusting the broker's certificate, when the listener is TLS
        self.config = config  # a server.properties file (--config), read again on SIGHUP

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "hpbroker", "serve", "--data-dir", str(self.data_dir),
               "--listen", self.bootstrap]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        for key, value in self.overrides.items():
            cmd += ["--set", f"{key}={value}"]
        if self.netns is not None:  # ip execs the broker: the pid stays the acceptor's
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        return cmd

    # --- life cycle ----------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT_S, wait: bool = True) -> "Broker":
        """Start the process; with ``wait``, return once it answers and every worker is up."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._log_file = open(self.log_path, "ab")
        self._log_offset = self._log_file.tell()  # worker lines of earlier runs do not count
        limit = self.nofile
        self.proc = subprocess.Popen(self.command(), cwd=REPO, stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT,
                                     preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
                                     if limit else None)
        if not wait:
            return self
        try:
            wait_for(self._ready, timeout, f"broker on {self.bootstrap} to answer Metadata")
            wait_for(lambda: len(self.worker_pids()) == self.num_workers, timeout, "every worker to be up")
            # a worker killed before it said "ready" is one that could not boot: the broker stops
            wait_for(lambda: "hpbroker.acceptor.supervisor: ready: " in self.log_text(since_start=True), timeout,
                     "every worker to have booted")
        except BaseException:
            self._abort()
            raise
        return self

    def still_starting(self) -> bool:
        """True, or BrokerError with its log when the process exited (its port taken, say)."""
        assert self.proc is not None, "not started"
        if self.proc.poll() is not None:
            raise BrokerError(f"broker on {self.bootstrap} exited with {self.proc.returncode} while starting:\n"
                              f"{self.log_tail()}")
        return True

    def _ready(self) -> bool:
        self.still_starting()
        with entered(self.netns):
            return metadata_ping(self.host, self.port, timeout=1.0, login=self.login, tls=self.tls)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, wait, and insist on a clean exit (code 0, clean-shutdown marker)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        workers = children(self.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._abort()
            raise BrokerError(f"broker did not stop within {timeout:.0f} s of SIGTERM:\n{self.log_tail()}")
        finally:
            self._close_log()
        if code != 0:
            raise BrokerError(f"broker exited with {code} after SIGTERM:\n{self.log_tail()}")
        leftover = {p for p in workers if _alive(p)}
        if leftover:
            raise BrokerError(f"workers {sorted(leftover)} outlived the acceptor")
        if not (self.data_dir / ".kafka_cleanshutdown").exists():
            raise BrokerError("no .kafka_cleanshutdown after a clean stop")
        return code

    def kill(self) -> None:
        """SIGKILL the acceptor and every worker at once (a machine-level crash of the
        process tree; the page cache survives, as after a kill -9 of Kafka)."""
        pids = children(self.pid) | {self.pid}
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        assert self.proc is not None  # it has a pid
        self.proc.wait(10)
        wait_for(lambda: not any(_alive(p) for p in pids), 10, "the killed workers to vanish")
        self._close_log()

    def restart(self, timeout: float = START_TIMEOUT_S) -> "Broker":
        self.stop()
        return self.start(timeout)

    def _abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            pids = children(self.pid)
            self.proc.kill()
            self.proc.wait(10)
            for pid in pids:
                _signal(pid, signal.SIGKILL)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    # --- workers ---------------------------------------------------------------------
    def worker_pids(self) -> dict[int, int]:
        """index -> pid of each live worker: the latest "worker N up" line of this
        run whose pid is still a child of the acceptor."""
        live = children(self.pid)
        found = {}
        for pid, index in _WORKER_UP.findall(self.log_text(since_start=True)):
            if int(pid) in live:
                found[int(index)] = int(pid)
        return found

    def worker_holding(self, client_port: int) -> int | None:
        """The index of the worker serving the client connection whose local port
        is ``client_port`` (the kernel's socket table and each worker's
        descriptors); None while no worker holds it (being handed over)."""
        inode = _server_socket_inode(self.pid, self.port, client_port)
        if inode is None:
            return None
        wanted = f"socket:[{inode}]"
        for index, pid in self.worker_pids().items():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                        return index
                except OSError:
                    continue
        return None

    def worker_serving(self, client_port: int, timeout: float = 30.0) -> int:
        """``worker_holding``, waited for: a connection just accepted, or being
        moved, is in the acceptor's hands for a moment."""
        def held() -> tuple[int] | None:
            index = self.worker_holding(client_port)
            return None if index is None else (index,)
        return wait_for(held, timeout, f"a worker to hold the connection from port {client_port}")[0]

    def kill_worker(self, index: int, timeout: float = START_TIMEOUT_S) -> int:
        """SIGKILL worker ``index``; wait until the acceptor has a new one up.
        Returns the new pid."""
        old = self.worker_pids()[index]
        _signal(old, signal.SIGKILL)
        return wait_for(lambda: (p := self.worker_pids().get(index)) not in (None, old) and p, timeout,
                        f"worker {index} to be restarted")

    def cpu_seconds(self) -> float:
        """CPU time of the acceptor and its workers: live ones from their own stat,
        restarted ones through the acceptor's cutime/cstime (they were reaped)."""
        return sum(self.cpu_times())

    def cpu_times(self) -> tuple[float, float]:
        """(user, system) seconds of the acceptor and its workers, as cpu_seconds counts them."""
        times = [cpu_times(self.pid, reaped_children=True)] + [cpu_times(p) for p in children(self.pid)]
        return sum(t[0] for t in times), sum(t[1] for t in times)

    # --- logs ------------------------------------------------------------------------
    def log_text(self, since_start: bool = False) -> str:
        try:
            with open(self.log_path, "rb") as f:
                if since_start:
                    f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def _server_socket_inode(pid: int, server_port: int, client_port: int) -> int | None:
    """The inode of the broker's end of an established TCP connection (in the
    socket tables of the network namespace process ``pid`` is in)."""
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if (state == "01" and int(local.rsplit(":", 1)[1], 16) == server_port
                    and int(remote.rsplit(":", 1)[1], 16) == client_port and inode != "0"):
                return int(inode)
    return None


def _alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
