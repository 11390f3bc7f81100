"""The brokers a cost benchmark compares, and the CPU meter it reads them with.

A target is a process tree this benchmark started: hpbroker's acceptor and
its workers (through harness/broker.py), or one tansu process. Its CPU is
utime+stime from /proc of every process in the tree, plus what the root has
reaped (a restarted worker), read before and after a phase.
"""

import os
import re
import resource
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.e2e import machine_busy
from harness.broker import Broker, children, cpu_times, free_port, minor_faults
from harness.waiting import wait_for


def tree_cpu(pid: int) -> tuple[float, float]:
    """(user, system) seconds of ``pid`` (with its reaped children) and all its live descendants."""
    user, system = cpu_times(pid, reaped_children=True)
    for child in children(pid):
        u, s = tree_cpu(child)
        user, system = user + u, system + s
    return user, system


def tree_minor_faults(pid: int) -> int:
    """Minor page faults of ``pid`` (with its reaped children) and all its live descendants: pages
    touched for the first time (on a VM that returns free memory to its host, a fault there too)."""
    return minor_faults(pid, reaped_children=True) + sum(tree_minor_faults(child) for child in children(pid))


class Target:
    """What the benchmark needs of a broker under test."""

    name = ""
    storage = ""
    bootstrap = ""

    @property
    def pid(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def request_counts(self) -> dict[str, float] | None:
        """The broker's own request (and record) counters, when it exposes them."""
        return None

    def create_topic(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(30)

        def ready() -> bool:  # every partition has a leader
            meta = admin.list_topics(topic, timeout=5).topics.get(topic)
            return bool(meta and len(meta.partitions) == partitions
                        and all(p.leader >= 0 and p.error is None for p in meta.partitions.values()))

        wait_for(ready, 30, f"{self.name} topic {topic} to have its leaders", interval=0.1)


class Hpbroker(Target):
    name = "hpbroker"
    storage = "segment files in the page cache (no fsync per message)"

    def __init__(self, root: Path, workers: int = 2):
        self.metrics_port = free_port()
        self.broker = Broker(root / "hpbroker-data", root / "hpbroker.log",
                             {"num.partitions": "2", "metrics.listen": f"127.0.0.1:{self.metrics_port}"},
                             num_workers=workers)
        self.bootstrap = self.broker.bootstrap

    @property
    def pid(self) -> int:
        return self.broker.pid

    @property
    def data_dir(self) -> Path:
        return self.broker.data_dir

    def start(self) -> None:
        self.broker.start()

    def stop(self) -> None:
        self.broker.stop()

    _SAMPLE = re.compile(r'^hpbroker_(requests_total\{api|topic_records_in_total\{topic)="([^"]+)"\} (\S+)$', re.M)

    def request_counts(self) -> dict[str, float]:
        """``{api name: requests, "records:<topic>": records}`` from /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {(name if kind.startswith("requests") else f"records:{name}"): float(value)
                for kind, name, value in self._SAMPLE.findall(text)}


class Tansu(Target):
    name = "Tansu"
    storage = "memory:// (the only engine built into this binary)"

    def __init__(self, binary: Path, root: Path):
        self.binary, self.log_path = binary, root / "tansu.log"
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self) -> None:
        url = f"tcp://{self.bootstrap}"  # advertised as bootstrapped: one connection per client
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(self.binary), "broker", "--listener-url", url,
                                          "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

        def answers() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}: see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(answers, 30, "tansu to listen", interval=0.05)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _own_cpu() -> float:
    """This process and the children it has reaped (a client that exited in the phase)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _pid_cpu(pid: int) -> float:
    return sum(cpu_times(pid))


class Meter:
    """CPU over one phase: of the target (user/sys), of the load generator (this
    process, the client processes given, and clients reaped meanwhile), and of
    everything else on the machine."""

    def __init__(self, target: Target, clients: list[int] | tuple[int, ...] = ()):
        self.target, self.clients = target, {pid: _pid_cpu(pid) for pid in clients}
        self.own, self.busy, self.broker = _own_cpu(), machine_busy(), tree_cpu(target.pid)
        self.faults = tree_minor_faults(target.pid)
        self.t0 = time.monotonic()

    def stop(self) -> dict[str, float]:
        t1 = time.monotonic()
        user, system = (b - a for a, b in zip(self.broker, tree_cpu(self.target.pid)))
        faults = tree_minor_faults(self.target.pid) - self.faults
        client = _own_cpu() - self.own + sum(_pid_cpu(p) - c for p, c in self.clients.items())
        busy = machine_busy() - self.busy
        wall = t1 - self.t0
        ncpu = len(os.sched_getaffinity(0))
        return {"t0": self.t0, "t1": t1, "wall": wall, "broker_cpu": user + system, "broker_user": user,
                "broker_sys": system, "broker_minor_faults": faults, "client_cpu": client,
                "other_share": max(0.0, busy - user - system - client) / wall / ncpu}
