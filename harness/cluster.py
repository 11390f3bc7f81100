"""A cluster of real brokers (``python -m hpbroker serve`` subprocesses) on one
ZooKeeper, each with its own log dir and loopback port, with short
timeouts so that failures are noticed within seconds.  What the tests ask of
the cluster (who leads, who is controller, is the ISR full) is read from
ZooKeeper itself, as an operator's ``zkCli.sh`` would."""

from __future__ import annotations

import os
import signal
import ssl
from pathlib import Path

from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from harness.broker import Broker, children
from harness.waiting import wait_for
from hpbroker.cli.connection import CliError
from hpbroker.cli.kafka_requests import Brokers, ClientSecurity
from hpbroker.cluster import session, znodes
from hpbroker.security.settings import Login

SESSION_MS = 6000
FAST = {
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "default.replication.factor": "3",
    "controlled.shutdown.retry.backoff.ms": "1000",
    "num.workers": "1",
    # three brokers on one host: pinned, every broker's worker 0 would share CPU 0
    "worker.cpu.affinity": "none",
}
WAIT_S = 60


class Cluster:
    def __init__(self, connect: str, directory: Path, size: int, overrides: dict | None = None,
                 login: tuple[str, str] | None = None, tls: ssl.SSLContext | None = None):
        """``login`` (PLAIN) and ``tls`` (a client context) for a SASL or TLS listener."""
        self.connect = connect
        self.security = ClientSecurity(Login("PLAIN", *login) if login else None, tls)
        self.brokers = {
            i: Broker(Path(directory) / f"broker-{i}", overrides={
                **FAST, "zookeeper.connect": connect, "broker.id": str(i), **(overrides or {})}, login=login,
                tls=tls)
            for i in range(1, size + 1)}
        self.zk = session.connect(connect, SESSION_MS, 10000)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    # --- life cycle ------------------------------------------------------------------
    def start_all(self) -> None:
        """Start every broker and wait until all answer and are registered; on a
        failure the ones started are killed (no fixture teardown runs then)."""
        try:
            for broker in self.brokers.values():
                broker.start(wait=False)
            for broker_id, broker in self.brokers.items():
                wait_for(broker._ready, WAIT_S, f"broker {broker_id} to answer")
            wait_for(lambda: all(b.still_starting() for b in self.brokers.values())
                     and self.registered() == set(self.brokers), WAIT_S, "every broker to register")
        except BaseException:
            self.close()
            raise

    def start(self, broker_id: int) -> None:
        self.brokers[broker_id].start(timeout=WAIT_S)
        wait_for(lambda: broker_id in self.registered(), WAIT_S, f"broker {broker_id} to register")

    def stop(self, broker_id: int) -> None:
        self.brokers[broker_id].stop(timeout=WAIT_S)

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker's whole process tree (acceptor and workers)."""
        self._signal_tree(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self._signal_tree(broker_id, signal.SIGCONT)

    def _signal_tree(self, broker_id: int, sig: int) -> None:
        pid = self.brokers[broker_id].pid
        for target in children(pid) | {pid}:
            os.kill(target, sig)

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is None:
                self._signal_tree_quietly(broker)
                broker.kill()
        session.close(self.zk)

    @staticmethod
    def _signal_tree_quietly(broker: Broker) -> None:
        for target in children(broker.pid) | {broker.pid}:
            try:
                os.kill(target, signal.SIGCONT)  # a paused broker must be able to die
            except ProcessLookupError:
                pass

    def logs(self, lines: int = 40) -> str:
        """The tail of every broker's log, for a failure message."""
        return "\n".join(f"--- broker {i} ---\n{b.log_tail(lines)}" for i, b in self.brokers.items())

    # --- what ZooKeeper says ------------------------------------------------------------
    def registered(self) -> set[int]:
        return {int(c) for c in self.zk.get_children(znodes.BROKER_IDS)}

    def controller(self) -> int:
        def found():
            data, _stat = self.zk.get(znodes.CONTROLLER) if self.zk.exists(znodes.CONTROLLER) else (None, None)
            return znodes.decode_controller(data) if data else None
        return wait_for(found, WAIT_S, "a controller")

    def state(self, topic: str, partition: int) -> znodes.PartitionState:
        # The test's own session may expire while ZooKeeper restarts under it: kazoo
        # then opens a new one, and the read is made again on that.
        data, stat = wait_for(lambda: self._read(znodes.partition_state_path(topic, partition)), WAIT_S,
                              f"ZooKeeper to answer for {topic}-{partition}'s state")
        return znodes.PartitionState.decode(topic, partition, data, stat.version, stat.mzxid)

    def _read(self, path: str):
        try:
            return self.zk.get(path)
        except (SessionExpiredError, ConnectionLoss):
            return None

    def leader_of(self, topic: str, partition: int) -> int:
        return wait_for(lambda: (leader := self.state(topic, partition).leader) >= 0 and leader, WAIT_S,
                        f"{topic}-{partition} to have a leader")

    # --- what clients are told -----------------------------------------------------------
    def announced_leader(self, broker_id: int, topic: str, partition: int) -> int | None:
        """The leader of ``topic``-``partition`` in broker ``broker_id``'s Metadata
        answer (-1 for none), or None when it does not answer or name the partition."""
        try:
            with Brokers(self.brokers[broker_id].bootstrap, 5, self.security) as brokers:
                answer = brokers.metadata([topic])
        except CliError:
            return None
        return next((int(p.leader_id) for t in answer.topics if t.name == topic for p in t.partitions
                     if int(p.partition_index) == partition), None)

    def wait_announced(self, topic: str, partition: int, leader: int) -> None:
        """Until every registered broker names ``leader`` in its Metadata answers.
        ZooKeeper says first; each broker's image follows a moment later, and a
        client asking meanwhile is told the leader is unavailable, which some
        (librdkafka's offset queries) take as final."""
        wait_for(lambda: all(self.announced_leader(b, topic, partition) == leader for b in self.registered()),
                 WAIT_S, f"every broker to announce {leader} as {topic}-{partition}'s leader")

    def wait_in_sync(self, topic: str, partitions: int) -> None:
        """Until every replica of every partition is in the ISR and a live broker leads.
        On a timeout the error names what was seen last: the live brokers and each
        partition out of step (leader, ISR, replicas), and the brokers' log tails."""
        seen: list[str] = []

        def full():
            try:
                return in_sync()
            except (SessionExpiredError, ConnectionLoss):  # ours, while ZooKeeper restarts: asked again
                seen[:] = ["ZooKeeper did not answer the test's own session"]
                return False

        def in_sync():
            live = self.registered()
            assignment = znodes.TopicAssignment.decode(topic, self.zk.get(znodes.topic_path(topic))[0])
            behind = []
            for p in range(partitions):
                if not self.zk.exists(znodes.partition_state_path(topic, p)):
                    behind.append(f"{topic}-{p}: no state")
                    continue
                state = self.state(topic, p)
                if state.leader not in live or sorted(state.isr) != sorted(assignment.partitions[p]):
                    behind.append(f"{topic}-{p}: leader {state.leader} (epoch {state.leader_epoch}), "
                                  f"ISR {state.isr}, replicas {assignment.partitions[p]}")
            seen[:] = [f"live brokers {sorted(live)}", *behind]
            return not behind
        try:
            wait_for(full, WAIT_S * 2, f"every replica of {topic} to be in sync")
        except TimeoutError as timeout:
            raise TimeoutError(f"{timeout}; last seen: {'; '.join(seen)}\n{self.logs(80)}") from None

