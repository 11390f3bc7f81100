"""One broker, three listeners: PLAINTEXT (the first, the brokers' own),
SSL and SASL_PLAINTEXT, each on its own port, as Kafka deployments run an
internal listener beside external ones.  Every client is told the addresses
of the listener it came in on (Metadata, FindCoordinator), so records
written through one listener are read through another; producers on two
listeners keep everything through SIGTERM, SIGKILL and killed workers; bad
bytes on one listener leave the others served; impossible listener settings
stop ``serve`` with one line."""

import signal
import socket
import struct
import subprocess
import sys

import confluent_kafka as ck
import kafka
import pytest
from confluent_kafka.admin import AdminClient

from harness.broker import REPO, Broker, free_port, metadata_ping
from harness.sasl import ADMIN, settings as sasl_settings
from harness.tls import Authority, ck_conf as tls_conf
from harness.waiting import wait_for
from tests.integration.clients import ck_consume_all, ck_produce, topic_name
from tests.integration.restarts import produce_through_a_restart
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

COMMON = {"num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}


class Listeners:
    """The three listeners' settings, ports and client settings."""

    def __init__(self, directory):
        self.authority = Authority(directory)
        self.certificate = self.authority.issue("broker", "broker-0", hosts=("127.0.0.1",))
        self.ssl_port, self.sasl_port = free_port(), free_port()
        sasl = sasl_settings("SASL_PLAINTEXT", app="app-secret")
        self.overrides = {
            **COMMON, **{k: v for k, v in sasl.items() if k != "listeners"},
            # --listen gives the first its port
            "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{self.ssl_port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "ssl.keystore.location": str(self.certificate.keystore_pem),
            "ssl.truststore.location": str(self.authority.ca_file)}

    def ssl(self) -> dict:
        return tls_conf(f"127.0.0.1:{self.ssl_port}", self.authority)

    def sasl(self) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "app-secret"}


@pytest.fixture(scope="module")
def listeners(tmp_path_factory):
    return Listeners(tmp_path_factory.mktemp("listeners"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, listeners):
    b = Broker(tmp_path_factory.mktemp("three") / "data", overrides=listeners.overrides).start()
    yield b
    b.stop()


def without_bootstrap(conf: dict) -> dict:
    return {k: v for k, v in conf.items() if k != "bootstrap.servers"}


def stored(listeners: Listeners, topic: str) -> list[bytes]:
    """Every record below the high watermarks, read through the SASL listener."""
    conf = listeners.sasl()
    return [r.value or b"" for r in ck_consume_all(conf["bootstrap.servers"], topic, [0, 1],
                                                   **without_bootstrap(conf))]


def test_each_client_is_told_the_addresses_of_its_listener(broker, listeners):
    for conf, port in ((listeners.ssl(), listeners.ssl_port), (listeners.sasl(), listeners.sasl_port),
                       ({"bootstrap.servers": broker.bootstrap}, broker.port)):
        found = AdminClient(conf).list_topics(timeout=30)
        assert [(b.id, b.host, b.port) for b in found.brokers.values()] == [(0, "127.0.0.1", port)], conf
    cluster = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap).describe_cluster()
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [("127.0.0.1", broker.port)]


def test_written_through_one_listener_read_through_the_others_by_groups(broker, listeners):
    """A group's coordinator is found through each listener (FindCoordinator
    answers with that listener's address): librdkafka groups on SSL and SASL,
    kafka-python's on PLAINTEXT, each read everything the SASL producer wrote."""
    topic = topic_name("three-ways")
    sasl = listeners.sasl()
    values = [b"r-%d" % i for i in range(300)]
    ck_produce(sasl["bootstrap.servers"], topic, [{"value": v, "partition": i % 2} for i, v in enumerate(values)],
               **without_bootstrap(sasl))
    for conf in (listeners.ssl(), sasl):
        consumer = ck.Consumer({**conf, "group.id": f"{topic}-{conf['security.protocol']}",
                                "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        seen: list[bytes] = []
        try:
            def read() -> bool:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen.append(message.value() or b"")
                return len(seen) >= len(values)
            wait_for(read, 60, f"a group on {conf['security.protocol']} to read every record")
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert sorted(seen) == sorted(values)
    kp_group = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"{topic}-plaintext",
                                   auto_offset_reset="earliest")
    kp_seen: list[bytes] = []
    try:
        def read_kp() -> bool:
            for records in kp_group.poll(timeout_ms=500).values():
                kp_seen.extend(r.value for r in records)
            return len(kp_seen) >= len(values)
        wait_for(read_kp, 60, "kafka-python's group on PLAINTEXT to read every record")
    finally:
        kp_group.close()
    assert sorted(kp_seen) == sorted(values)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_producers_on_two_listeners_lose_nothing_through_a_restart(broker_factory, tmp_path, how):
    """librdkafka over TLS, kafka-python on PLAINTEXT, both idempotent."""
    listeners = Listeners(tmp_path / "pki")  # ports of its own: the module's broker holds the others
    b = broker_factory(listeners.overrides)
    topic = topic_name("two-restart")
    acked = produce_through_a_restart(b, topic, how, listeners.ssl(), {})
    assert len(acked["kp"]) > 1000 and len(acked["ck"]) > 1000, "both got most records through"
    assert_acknowledged_once(stored(listeners, topic), acked["ck"] | acked["kp"])


def test_producers_on_two_listeners_lose_nothing_when_workers_are_killed(broker_factory, tmp_path):
    """librdkafka logged in on SASL_PLAINTEXT, kafka-python on PLAINTEXT."""
    listeners = Listeners(tmp_path / "pki")
    b = broker_factory(listeners.overrides, num_workers=2)
    topic = topic_name("two-kills")
    total = 3000
    acked = produce_through_worker_kills(
        b, topic, total, lambda client, i: b"%s-%d" % (client.encode(), i), lambda _, i: i % 2,
        linger_ms=0, pace_every=5, pace_s=0.001, ck_conf=listeners.sasl())
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    assert_acknowledged_once(stored(listeners, topic), acked["ck"] | acked["kp"])


def test_bad_bytes_on_each_listener_close_only_that_connection(broker, listeners):
    """Plaintext bytes at the TLS port, an oversized frame before a SASL login,
    a frame with an unknown API key on PLAINTEXT: each connection is closed,
    and every listener goes on serving."""
    junk = {listeners.ssl_port: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            listeners.sasl_port: struct.pack(">i", 64 << 20) + b"\0" * 64,
            broker.port: struct.pack(">ihhi", 8, 9999, 0, 1)}
    for port, data in junk.items():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(15)
            while s.recv(65536):
                pass  # until the broker closes it
    assert metadata_ping("127.0.0.1", broker.port)
    assert metadata_ping("127.0.0.1", listeners.sasl_port, login=ADMIN)
    assert metadata_ping("127.0.0.1", listeners.ssl_port, tls=listeners.authority.client_context())


@pytest.mark.parametrize("listeners_text, extra, message", [
    ("PLAINTEXT://127.0.0.1:{p},SASL_PLAINTEXT://127.0.0.1:{p}", [], "give each listener a port of its own"),
    ("A://127.0.0.1:{p},B://127.0.0.1:{q}", ["listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT"],
     "name the one the brokers connect to each other through with inter.broker.listener.name"),
    ("PLAINTEXT://127.0.0.1:{p}", ["advertised.listeners=EXTERNAL://h:1"], "EXTERNAL is not one of the listeners"),
])
def test_serve_refuses_impossible_listeners_in_one_line(tmp_path, listeners_text, extra, message):
    text = listeners_text.format(p=free_port(), q=free_port())
    cmd = [sys.executable, "-m", "hpbroker", "serve", "--data-dir", str(tmp_path / "data"), "--set",
           f"listeners={text}", *[a for e in extra for a in ("--set", e)]]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
