"""The acceptor never drops a connection it accepted because of its own state:
not while the workers boot, not in a burst, not when a worker dies with
connections queued to it, not at the descriptor limit; a worker that keeps
dying is restarted without stopping the broker, one that cannot boot stops it
with its reason; and the log directories stay locked by the acceptor
throughout."""

import logging
import os
import resource
import selectors
import signal
import socket
import struct

import confluent_kafka as ck
import pytest

from harness.broker import cpu_seconds, metadata_ping
from harness.waiting import wait_for


def _api_versions(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"  # ApiVersions v0
    return struct.pack(">i", len(body)) + body


@pytest.fixture
def many_descriptors():
    """Let this test process hold a few thousand sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Clients:
    """Many connections, each sending one ApiVersions request and reading its
    answer; ``answered`` counts whole answers, ``reset`` connections closed
    on them."""

    def __init__(self, broker, count: int):
        self.selector = selectors.DefaultSelector()
        self.pending: dict[socket.socket, bytes] = {}
        self.answered = self.reset = 0
        for i in range(count):
            sock = socket.create_connection((broker.host, broker.port), timeout=10)
            sock.sendall(_api_versions(i))
            sock.setblocking(False)
            self.pending[sock] = b""
            self.selector.register(sock, selectors.EVENT_READ)

    def poll(self, timeout: float = 0.05) -> int:
        for key, _ in self.selector.select(timeout):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)  # only sockets are registered
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = None
            if not data:
                self.reset += 1
                self._forget(sock)
                continue
            buffered = self.pending[sock] + data
            self.pending[sock] = buffered
            if len(buffered) >= 4 and len(buffered) >= 4 + struct.unpack_from(">i", buffered)[0]:
                self.answered += 1
                self._forget(sock)
        return self.answered

    def _forget(self, sock) -> None:
        self.selector.unregister(sock)
        del self.pending[sock]
        sock.close()

    def close(self) -> None:
        for sock in list(self.pending):
            self._forget(sock)


def test_clients_connecting_while_the_workers_boot_are_answered(broker_factory):
    broker = broker_factory(start=False)
    broker.start(wait=False)

    def connect():
        try:
            return socket.create_connection((broker.host, broker.port), timeout=1)
        except OSError:
            return None

    first = wait_for(connect, 30, "the port to open", interval=0.001)
    booting = "workers serving" not in broker.log_text(since_start=True)
    first.sendall(_api_versions(0))
    first.settimeout(30)
    assert len(first.recv(4)) == 4, "the connection made while booting was closed"
    first.close()
    assert booting, "the workers were up before the port opened: nothing was tested"
    wait_for(lambda: len(broker.worker_pids()) == broker.num_workers, 30, "every worker to be up")


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_librdkafka_producer_started_with_the_broker_sees_no_dropped_connection(broker_factory):
    broker = broker_factory(start=False)
    librdkafka_log = logging.getLogger(f"librdkafka-{broker.port}")
    librdkafka_log.setLevel(logging.INFO)  # librdkafka reports a dropped connection at its level 6, info
    collected = _Collect()
    librdkafka_log.addHandler(collected)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "logger": librdkafka_log,
                            "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50})
    broker.start(wait=False)
    for i in range(10):
        producer.produce("boot", value=b"%d" % i)
    assert producer.flush(60) == 0
    # "Connection refused" before the port opens is fine; a connection the broker accepted and then closed is not
    dropped = [line for line in collected.lines if "Disconnected" in line or "ApiVersion" in line]
    assert not dropped, dropped


def test_a_burst_of_two_thousand_connections_is_answered_in_full(broker, many_descriptors):
    clients = Clients(broker, 2000)
    try:
        wait_for(lambda: clients.poll() + clients.reset >= 2000, 60, "every connection's answer")
        assert (clients.answered, clients.reset) == (2000, 0)
    finally:
        clients.close()
    assert "cannot take connections" not in broker.log_text()


def test_connections_queued_to_a_dying_worker_go_to_the_others(broker_factory):
    broker = broker_factory()
    victim = broker.worker_pids()[0]
    os.kill(victim, signal.SIGSTOP)  # it adopts nothing more: what is sent to it waits in its channel
    clients = None
    try:
        clients = Clients(broker, 100)
        wait_for(lambda: clients.poll() >= 30, 30, "the running worker to answer its share")
        assert clients.answered < 100, "the stopped worker was given nothing: nothing was tested"
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: clients.poll() + clients.reset >= 100, 30, "every connection's answer")
        assert (clients.answered, clients.reset) == (100, 0)
    finally:
        os.kill(victim, signal.SIGKILL) if os.path.exists(f"/proc/{victim}") else None
        if clients is not None:
            clients.close()
    wait_for(lambda: broker.worker_pids().get(0) not in (None, victim), 30, "worker 0 to be restarted")


def test_at_its_descriptor_limit_the_broker_neither_spins_nor_floods_its_log(broker_factory, many_descriptors):
    broker = broker_factory(start=False, nofile=160)
    broker.start()
    clients = Clients(broker, 600)  # more than the acceptor and both workers can hold
    try:
        wait_for(lambda: "accept failed" in broker.log_text(since_start=True), 30, "the acceptor to run out")
        before = cpu_seconds(broker.pid)
        lines_before = len(broker.log_text(since_start=True).splitlines())
        deadline_poll = [clients.poll(0.5) for _ in range(6)]  # three seconds at the limit
        assert deadline_poll
        assert cpu_seconds(broker.pid) - before < 0.5, "the acceptor spins at its descriptor limit"
        new_lines = len(broker.log_text(since_start=True).splitlines()) - lines_before
        assert new_lines < 20, broker.log_tail(40)
    finally:
        clients.close()
    wait_for(lambda: metadata_ping(broker.host, broker.port), 30, "a new client to be served once descriptors free up")


def test_workers_are_pinned_one_to_a_cpu_unless_worker_cpu_affinity_says_none(broker_factory):
    usable = sorted(os.sched_getaffinity(0))
    pinned = broker_factory(num_workers=2)
    for index, pid in pinned.worker_pids().items():
        assert os.sched_getaffinity(pid) == {usable[index % len(usable)]}
    assert os.sched_getaffinity(pinned.pid) == set(usable)  # the acceptor itself is never pinned
    pinned.stop()
    floating = broker_factory(num_workers=2, overrides={"worker.cpu.affinity": "none"})
    assert [os.sched_getaffinity(pid) for pid in floating.worker_pids().values()] == [set(usable)] * 2
    floating.kill_worker(1)  # a restarted worker is placed as the first was
    assert os.sched_getaffinity(floating.worker_pids()[1]) == set(usable)


def test_a_worker_that_keeps_dying_is_restarted_without_stopping_the_broker(broker_factory):
    broker = broker_factory()
    for _ in range(6):  # more than the old budget of five exits a minute
        broker.kill_worker(0, timeout=60)
    assert broker.proc.poll() is None
    assert "restarting it in" in broker.log_text(since_start=True)  # it backed off
    assert metadata_ping(broker.host, broker.port)


def test_the_acceptor_keeps_the_log_dir_locked_while_its_workers_come_and_go(broker_factory):
    broker = broker_factory(num_workers=2)
    broker.kill_worker(0)
    rival = broker_factory(start=False, data_dir=broker.data_dir)
    rival.start(wait=False)
    assert rival.proc.wait(30) == 1
    assert "is in use by another broker" in rival.log_text()
    assert metadata_ping(broker.host, broker.port)


def test_a_worker_that_cannot_boot_stops_the_broker_with_its_reason(broker_factory, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for log_dir in (first, second):
        (log_dir / "t-0").mkdir(parents=True)  # the worker owning t-0 refuses to guess which is real
    broker = broker_factory(start=False, data_dir=f"{first},{second}", num_workers=2)
    broker.start(wait=False)
    assert broker.proc.wait(60) == 1
    assert "could not boot: partition t-0 is in two log dirs" in broker.log_text(), broker.log_tail()
