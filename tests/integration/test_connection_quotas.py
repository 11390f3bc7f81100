"""Kafka's connection quotas on a running broker, with clients on other
loopback addresses (127.0.0.2, ...: Linux routes all of 127/8 to lo) so an
address's limit can be reached while the tests' own clients, on 127.0.0.1,
are not held: ``max.connections.per.ip`` (refused at once, counted down as
connections close and as a killed worker's die with it, changed by a
reload), ``max.connections`` (new clients wait in the backlog, the brokers'
listener does not), ``max.connection.creation.rate`` (a burst is spread
out), with librdkafka served throughout."""

import select
import signal
import socket
import struct
import time

from harness.broker import Broker, free_port, metadata_ping, recv_exact
from harness.waiting import wait_for
from tests.integration.clients import ck_consume, ck_produce, topic_name

API_VERSIONS = struct.pack(">hhih", 18, 0, 7, 1) + b"q"  # ApiVersions v0, correlation 7, client id "q"


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.settimeout(30)
    return s


def ask(s: socket.socket) -> None:
    s.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)


def answered(s: socket.socket, within: float) -> bool:
    """The ApiVersions answer arrived within ``within`` seconds (it is read)."""
    if not select.select([s], [], [], within)[0]:
        return False
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    assert struct.unpack(">i", recv_exact(s, size)[:4])[0] == 7
    return True


def served(port: int, source: str) -> socket.socket:
    s = connect(port, source)
    ask(s)
    assert answered(s, 30), f"a connection from {source} was not served"
    return s


def refused(port: int, source: str) -> bool:
    """Accepted and closed at once, as Kafka refuses an address at its limit."""
    with connect(port, source) as s:
        try:
            ask(s)
            return s.recv(64) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True


def round_trip(b: Broker) -> None:
    """librdkafka on 127.0.0.1 writes and reads."""
    topic = topic_name("quota")
    ck_produce(b.bootstrap, topic, [{"value": b"v%d" % i} for i in range(20)])
    assert len(ck_consume(b.bootstrap, topic, [0], 20)) == 20


def test_an_address_at_its_limit_is_refused_until_its_connections_close(broker_factory, tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("max.connections.per.ip=2\nmax.connections.per.ip.overrides=127.0.0.1:1000\n")
    b = broker_factory(config=config, num_workers=2)
    first, second = served(b.port, "127.0.0.2"), served(b.port, "127.0.0.2")
    assert refused(b.port, "127.0.0.2")
    wait_for(lambda: "refused a connection from 127.0.0.2" in b.log_text(), 30, "the refusal in the log")
    served(b.port, "127.0.0.3").close()  # another address: its own count
    round_trip(b)  # the override: 127.0.0.1 is not held
    first.close()
    wait_for(lambda: not refused(b.port, "127.0.0.2"), 30, "a closed connection to free its slot")

    # a worker SIGKILLed: the connections it held died with it, and their slots with them
    second.close()
    held = [served(b.port, "127.0.0.4"), served(b.port, "127.0.0.4")]
    workers = {b.worker_serving(s.getsockname()[1]) for s in held}
    for index in workers:
        b.kill_worker(index)
    for s in held:
        s.close()
    wait_for(lambda: not refused(b.port, "127.0.0.4"), 60, "the killed worker's connections to be forgotten")

    # a reload lowers the limit: what is open stays, the next from that address is refused
    third = served(b.port, "127.0.0.3")
    config.write_text("max.connections.per.ip=1\nmax.connections.per.ip.overrides=127.0.0.1:1000\n")
    b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
    wait_for(lambda: refused(b.port, "127.0.0.3"), 30, "the reloaded limit to refuse 127.0.0.3")
    ask(third)
    assert answered(third, 30), "a connection open before the reload is still served"
    third.close()


def test_max_connections_holds_new_clients_in_the_backlog_but_not_the_brokers_listener(broker_factory):
    external = free_port()
    b = broker_factory({"listeners": f"PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:{external}",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
                        "max.connections": "2"})
    held = [served(external, "127.0.0.2"), served(external, "127.0.0.2")]
    waiting = connect(external, "127.0.0.2")  # the kernel completes the handshake: it waits in the backlog
    ask(waiting)
    wait_for(lambda: "listener EXTERNAL is at its connection limit" in b.log_text(), 30, "the limit in the log")
    assert not answered(waiting, 1.0), "a connection past max.connections was served"
    # the brokers' own listener (PLAINTEXT, the inter-broker one) is not held by the broker-wide limit
    assert metadata_ping("127.0.0.1", b.port)
    held[0].close()
    assert answered(waiting, 30), "the waiting connection is served once another closes"
    waiting.close()
    held[1].close()


def test_a_burst_of_connections_is_spread_over_time_by_the_creation_rate(broker_factory):
    b = broker_factory({"max.connection.creation.rate": "5"})
    sockets = [connect(b.port, "127.0.0.2") for _ in range(20)]
    for s in sockets:
        ask(s)
    start = time.monotonic()
    times = []
    for s in sockets:
        assert answered(s, 30)
        times.append(time.monotonic() - start)
        s.close()
    # at most 5 at once, then 5 a second: the last of 20 at least 3 s after the first (later when
    # the start's own probes took some of the first second's)
    assert max(times) >= 2.0, f"20 connections served within {max(times):.2f} s at 5 a second"
    round_trip(b)
