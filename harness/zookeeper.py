"""A real ZooKeeper server for the tests and benchmarks: Debian's ``zookeeper`` package, run
standalone on a loopback port with its own data dir (or, given ``host`` and
``netns``, on a tests/cluster/netlab.py host's address inside its namespace)."""

import os
import pathlib
import signal
import socket
import subprocess

from kazoo.client import KazooClient

from harness.broker import free_port
from harness.netns import entered
from harness.waiting import wait_for

ZOOKEEPER_JAR = pathlib.Path("/usr/share/java/zookeeper.jar")
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
START_TIMEOUT_S = 30.0


def four_letter(port: int, word: bytes, timeout: float = 1.0, host: str = "127.0.0.1") -> bytes:
    with socket.create_connection((host, port), timeout) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


def expire_session(connect: str, client: KazooClient) -> None:
    """Make ZooKeeper expire ``client``'s session now, as it does a broker's whose
    heartbeats stopped: a second client takes over the session (same id and
    password) and closes it. ``client`` hears of it on its next exchange and
    opens a new session."""
    assert client.client_id is not None, "the client has no session to expire"
    session_id, password = client.client_id
    twin = KazooClient(hosts=connect, client_id=(session_id, password))
    twin.start(10)
    twin.stop()
    twin.close()


class ZooKeeperServer:
    def __init__(self, directory: pathlib.Path, port: int | None = None, tick_ms: int = 200,
                 host: str | None = None, netns: str | None = None):
        """``host``: the address to serve on (127.0.0.1 unless given); ``netns``: a
        network namespace to run in (through ``ip netns exec``), where the
        readiness check then runs too."""
        self.directory = pathlib.Path(directory)
        self.port = port or free_port()
        self.host = host or "127.0.0.1"
        self.netns = netns
        self.tick_ms = tick_ms
        self.process: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> pathlib.Path:
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        # short ticks allow the short session timeouts the tests use (min 2 ticks)
        config.write_text("\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.directory / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,cons",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "",
        ]))
        return config

    def _serving(self) -> bool:
        assert self.process is not None, "not started"
        if self.process.poll() is not None:
            raise AssertionError(f"ZooKeeper exited with {self.process.returncode}:\n{self.log_tail()}")
        try:
            with entered(self.netns):
                return (four_letter(self.port, b"ruok", host=self.host) == b"imok"
                        and b"Mode:" in four_letter(self.port, b"srvr", host=self.host))
        except OSError:
            return False

    def start(self) -> "ZooKeeperServer":
        assert ZOOKEEPER_JAR.exists(), "Debian's zookeeper package is not installed (scripts/test.sh installs it)"
        config = self._write_config()
        self.log_path = self.directory / "zookeeper.log"
        command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{self.directory}:{ZOOKEEPER_JAR}", MAIN,
                   str(config)]
        if self.netns is not None:  # ip execs java: the pid (and process group) stay java's
            command = ["ip", "netns", "exec", self.netns, *command]
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._serving, START_TIMEOUT_S, "ZooKeeper to serve")
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def kill(self) -> None:
        """SIGKILL the server (a crash: no clean shutdown, the data dir as it was)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self) -> "ZooKeeperServer":
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
