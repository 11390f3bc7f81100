"""A ZooKeeper server and three brokers, each on a host of its own in a
``NetLab`` (tests.cluster.netlab), and a "client" host for the test itself:
the same short timeouts as harness.cluster.Cluster, min.insync.replicas=2,
and the cluster's own view (who leads, what is in sync) read from ZooKeeper by
a session that lives on the client host.

Hosts: ``zk`` (ZooKeeper on <ip>:2181), ``b1``..``b3`` (broker N on <ip>:9092,
listening on and advertising its host's address), ``client``.  Faults are the
lab's (``cluster.lab.cut(cluster.hosts[1], cluster.zk_host)``...) and the
process ones (kill, pause, zk_kill, wipe).  Clients must be created inside the
client host (``with cluster.inside_client(): ...``); from the root namespace
the lab's addresses are unreachable."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

from harness.broker import Broker
from harness.cluster import FAST, SESSION_MS, Cluster
from harness.zookeeper import ZooKeeperServer
from hpbroker.cli.kafka_requests import ClientSecurity
from hpbroker.cluster import session
from hpbroker.security.settings import Login
from tests.cluster.netlab import Host, NetLab

ZK_PORT = 2181
BROKER_PORT = 9092


class LabCluster(Cluster):
    """Cluster's life cycle and ZooKeeper queries, on lab hosts (see the module doc)."""

    def __init__(self, lab: NetLab, directory: Path, size: int = 3, overrides: dict | None = None,
                 chroot: str = "/hpbroker", login: tuple[str, str] | None = None,
                 tls: ssl.SSLContext | None = None):
        self.lab = lab
        self.security = ClientSecurity(Login("PLAIN", *login) if login else None, tls)
        self.directory = Path(directory)
        self.zk_host: Host = lab.add_host("zk")
        self.hosts: dict[int, Host] = {i: lab.add_host(f"b{i}") for i in range(1, size + 1)}
        self.client: Host = lab.add_host("client")
        self.zookeeper = ZooKeeperServer(self.directory / "zookeeper", port=ZK_PORT,
                                         host=self.zk_host.ip, netns=self.zk_host.netns)
        self.connect = f"{self.zookeeper.connect}{chroot}"
        self.brokers = {
            i: Broker(self.directory / f"broker-{i}", port=BROKER_PORT, host=host.ip, netns=host.netns, overrides={
                **FAST, "zookeeper.connect": self.connect, "broker.id": str(i), "min.insync.replicas": "2",
                **(overrides or {})}, login=login, tls=tls)
            for i, host in self.hosts.items()}
        self.zk = None

    def inside_client(self):
        """The calling thread on the client host for the block (clients made there stay there)."""
        return self.lab.inside(self.client)

    # --- life cycle ------------------------------------------------------------------
    def start_all(self) -> None:
        """ZooKeeper, then every broker; returns once all are registered."""
        if self.zookeeper.process is None or self.zookeeper.process.poll() is not None:
            self.zookeeper.start()
        if self.zk is None:
            with self.inside_client():  # kazoo's threads are born, and stay, on the client host
                self.zk = session.connect(self.connect, SESSION_MS, 10000)
        super().start_all()

    def zk_kill(self) -> None:
        """SIGKILL ZooKeeper."""
        self.zookeeper.kill()

    def zk_start(self) -> None:
        """ZooKeeper again, on the same data dir and address; returns once it serves."""
        self.zookeeper.start()

    def wipe(self, broker_id: int) -> None:
        """Delete a stopped (or killed) broker's data dir: a disk lost with everything on it."""
        broker = self.brokers[broker_id]
        assert broker.proc is None or broker.proc.poll() is not None, f"broker {broker_id} is running"
        shutil.rmtree(broker.data_dir, ignore_errors=True)

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is None:
                self._signal_tree_quietly(broker)
                broker.kill()
        if self.zk is not None:
            session.close(self.zk)
            self.zk = None
        self.zookeeper.kill()
