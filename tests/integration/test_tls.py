"""A broker whose listener is SSL or SASL_SSL, standalone, with the clients
people use: librdkafka, kafka-python, aiokafka, Debian's kcat and kafkajs,
reading records large enough to leave the sendfile path; clients that do not
speak TLS, or show no certificate or one of another authority, are refused
while everyone else is served; ``ssl.principal.mapping.rules``; the broker
SIGTERMed, SIGKILLed and its workers SIGKILLed under idempotent producers
over TLS; a reload that takes a renewed certificate; the CLI over TLS."""

import hashlib
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys

import confluent_kafka as ck
import kafka
import kafka.errors
import pytest
from cryptography import x509

from harness.broker import REPO, Broker, metadata_ping
from harness.sasl import ADMIN, add_scram_user, settings as sasl_settings
from harness.tls import Authority, broker_settings, ck_conf
from harness.waiting import wait_for
from tests.integration import node as nodejs
from tests.integration.clients import ck_consume, ck_consume_all, python_clients_round_trip, topic_name
from tests.integration.restarts import produce_through_a_restart
from tests.integration.test_kafkajs import KAFKAJS
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

COMMON = {"num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """An authority, the broker's certificate (for 127.0.0.1), a client's, and
    a client certificate from an authority the broker does not trust."""
    directory = tmp_path_factory.mktemp("pki")
    authority = Authority(directory)
    stranger = Authority(directory / "other", "some other CA")
    return {"ca": authority, "broker": authority.issue("broker", "broker-0", hosts=("127.0.0.1", "localhost")),
            "alice": authority.issue("alice", "alice", unit="eng"),
            "mallory": stranger.issue("mallory", "mallory", unit="eng")}


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    """SSL, client certificates requested: a client may show one or not."""
    overrides = {**broker_settings(pki["ca"], pki["broker"], client_auth="requested"), **COMMON}
    b = Broker(tmp_path_factory.mktemp("tls") / "data", overrides=overrides, tls=pki["ca"].client_context()).start()
    yield b
    b.stop()


def kp_conf(pki, client: str | None = None) -> dict:
    conf = {"security_protocol": "SSL", "ssl_cafile": str(pki["ca"].ca_file)}
    if client is not None:
        conf.update(ssl_certfile=str(pki[client].cert_file), ssl_keyfile=str(pki[client].key_file))
    return conf


def stored(bootstrap: str, topic: str, partitions, **conf) -> list[bytes]:
    """Every record below the high watermarks."""
    return [r.value or b"" for r in ck_consume_all(bootstrap, topic, partitions, **conf)]


def without_bootstrap(conf: dict) -> dict:
    return {k: v for k, v in conf.items() if k != "bootstrap.servers"}


# --- the clients --------------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_librdkafka_produces_and_reads_large_answers_over_tls(broker, pki, compression):
    """Fetch answers beyond the size read into memory go out of the segment
    files through TLS (no sendfile there): every byte must arrive intact."""
    topic = topic_name("tls-ck")
    conf = ck_conf(broker.bootstrap, pki["ca"], pki["alice"])
    producer = ck.Producer({**conf, "enable.idempotence": True, "compression.type": compression,
                            "linger.ms": 20, "batch.size": 1 << 20})
    values = [hashlib.sha256(b"%d" % i).digest() * 64 for i in range(4000)]  # 2 KiB each, 8 MiB in all
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=i % 2)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    consumer = ck.Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest",
                            "fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 2 << 20})
    consumer.subscribe([topic])
    seen: dict[bytes, int] = {}
    try:
        def read() -> bool:
            for message in consumer.consume(500, 0.5):
                if message.error() is None:
                    seen[message.value() or b""] = seen.get(message.value() or b"", 0) + 1
            return len(seen) == len(values)
        wait_for(read, 60, "every record read in the group")
    finally:
        consumer.close()
    assert set(seen) == set(values) and set(seen.values()) == {1}


def test_kafka_python_and_aiokafka_over_tls(broker, pki):
    topic = topic_name("tls-py")
    aiokafka_conf = {"security_protocol": "SSL", "ssl_context": pki["ca"].client_context(pki["alice"])}
    values = python_clients_round_trip(broker.bootstrap, topic, kp_conf(pki), aiokafka_conf)
    assert sorted(values) == sorted([b"kp-%d" % i for i in range(50)] + [b"ak-%d" % i for i in range(50)])


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_tls(broker, pki):
    topic = topic_name("tls-kcat")
    tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki['ca'].ca_file}"]
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", *tls],
                   input="".join(f"line {i}\n" for i in range(100)), text=True, check=True, timeout=60)
    read = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-e", "-q", *tls],
                          capture_output=True, text=True, check=True, timeout=60)
    assert read.stdout.splitlines() == [f"line {i}" for i in range(100)]


# --- what is refused ----------------------------------------------------------------------
METADATA_V0_ALL = struct.pack(">hhih", 3, 0, 7, 4) + b"ping" + struct.pack(">i", 0)


def closed_without_answer(s: socket.socket) -> bool:
    s.settimeout(20)
    try:
        return s.recv(4096) == b""
    except (ConnectionResetError, ssl.SSLEOFError):  # an abort, and TLS's view of it
        return True


def test_clients_that_do_not_speak_tls_are_turned_away_and_others_served(broker, pki):
    """A plaintext Kafka request, garbage, and a client that connects and says
    nothing: each costs only its own connection; the log names why."""
    plaintext = socket.create_connection((broker.host, broker.port), timeout=10)
    garbage = socket.create_connection((broker.host, broker.port), timeout=10)
    silent = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        plaintext.sendall(struct.pack(">i", len(METADATA_V0_ALL)) + METADATA_V0_ALL)
        garbage.sendall(b"\x16\x03\x01\x00\x05hello" + bytes(range(256)) * 4)
        assert closed_without_answer(plaintext) and closed_without_answer(garbage)
        assert metadata_ping(broker.host, broker.port, tls=pki["ca"].client_context())  # while silent waits
        stranger = ssl.create_default_context()  # trusts the system's authorities, not ours
        with socket.create_connection((broker.host, broker.port), timeout=10) as s:
            with pytest.raises(ssl.SSLCertVerificationError):
                stranger.wrap_socket(s, server_hostname=broker.host)
        assert closed_without_answer(silent)  # after the handshake timeout
    finally:
        for s in (plaintext, garbage, silent):
            s.close()
    wait_for(lambda: "no handshake within" in broker.log_text(), 10, "the silent client's line in the log")
    log = broker.log_text()
    assert "TLS handshake with 127.0.0.1:" in log and "wrong version number" in log
    assert metadata_ping(broker.host, broker.port, tls=pki["ca"].client_context())


def test_bad_frames_inside_tls_cost_only_their_connection(broker, pki):
    """Past the handshake the request path is the PLAINTEXT one: an oversized
    frame, an unknown API key and a truncated body each close their own
    connection, with the reason logged, and nothing else."""
    context = pki["ca"].client_context()
    bad = [struct.pack(">i", 200 << 20),  # beyond socket.request.max.bytes
           struct.pack(">ihhih", 10, 999, 0, 1, 0),  # api key 999
           struct.pack(">ihhih", 11, 3, 5, 1, 0) + b"\x00"]  # Metadata v5, its topic array cut short
    for frame in bad:
        with context.wrap_socket(socket.create_connection((broker.host, broker.port), timeout=10),
                                 server_hostname=broker.host) as s:
            s.sendall(frame)
            assert closed_without_answer(s)
        assert metadata_ping(broker.host, broker.port, tls=context)
    log = broker.log_text()
    assert "exceeds socket.request.max.bytes" in log and "unknown api key 999" in log
    assert "malformed request" in log


def test_mutual_tls_refuses_clients_without_a_trusted_certificate(broker_factory, pki):
    """ssl.client.auth=required: a client must show a certificate of a trusted authority."""
    overrides = {**broker_settings(pki["ca"], pki["broker"], client_auth="required"), **COMMON}
    b = broker_factory(overrides, tls=pki["ca"].client_context(pki["alice"]))
    topic = topic_name("mtls")
    good = ck.Producer({**ck_conf(b.bootstrap, pki["ca"], pki["alice"]), "enable.idempotence": True})
    for i in range(100):
        good.produce(topic, b"%d" % i, partition=0)
    assert good.flush(30) == 0
    for client in (None, "mallory"):
        errors: list[str] = []
        conf = {**ck_conf(b.bootstrap, pki["ca"], pki[client] if client else None),
                "error_cb": lambda e: errors.append(e.str())}
        refused = ck.Producer(conf)
        refused.produce(topic, b"refused", partition=0)
        wait_for(lambda: refused.poll(0.2) >= 0 and bool(errors), 30, f"{client or 'no certificate'} refused")
        assert refused.flush(0) == 1  # never delivered
    assert not metadata_ping(b.host, b.port, tls=pki["ca"].client_context())  # no certificate
    log = b.log_text()
    assert "peer did not return a certificate" in log and "certificate verify failed" in log
    assert [r.value for r in ck_consume(b.bootstrap, topic, [0], 100, **without_bootstrap(
        ck_conf("", pki["ca"], pki["alice"])))] == [b"%d" % i for i in range(100)]


def test_principal_mapping_rules_decide_who_a_certificate_names(broker_factory, pki):
    """RULE maps a certificate's subject to a user; a subject no rule maps is refused."""
    overrides = {**broker_settings(pki["ca"], pki["broker"], client_auth="required"), **COMMON,
                 "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=eng,.*$/$1/U"}
    b = broker_factory(overrides, tls=pki["ca"].client_context(pki["alice"]))
    wait_for(lambda: "User:ALICE connected from 127.0.0.1:" in b.log_text(), 10, "alice's principal in the log")
    operator = pki["ca"].issue("operator", "operator", unit="ops")
    assert not metadata_ping(b.host, b.port, tls=pki["ca"].client_context(operator))
    assert "no rule of ssl.principal.mapping.rules maps its certificate's subject" in b.log_text()


def test_sasl_ssl_logs_in_over_tls(broker_factory, pki):
    """SASL_SSL: the login goes through TLS; librdkafka with SCRAM, kafka-python
    with PLAIN, kafkajs with each; a wrong password is refused."""
    overrides = {**sasl_settings("SASL_SSL", alice="alice-secret"),
                 **broker_settings(pki["ca"], pki["broker"], "SASL_SSL"), **COMMON}
    b = broker_factory(overrides, login=ADMIN, tls=pki["ca"].client_context())
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki["ca"].ca_file)}
    add_scram_user(b.bootstrap, "carol", {"SCRAM-SHA-512": (b"carol-512", 8192)}, tls)
    topic = topic_name("sasl-ssl")
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, **tls, "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.username": "carol", "sasl.password": "carol-512", "enable.idempotence": True})
    for i in range(100):
        producer.produce(topic, b"ck-%d" % i, partition=0)
    assert producer.flush(30) == 0
    kp = kafka.KafkaProducer(bootstrap_servers=b.bootstrap, security_protocol="SASL_SSL",
                             ssl_cafile=str(pki["ca"].ca_file), sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret")
    assert kp.send(topic, b"kp", partition=0).get(30)
    kp.close(10)
    with pytest.raises(kafka.errors.KafkaError):  # kafka-python gives up bootstrapping, in the constructor
        wrong = kafka.KafkaProducer(bootstrap_servers=b.bootstrap, security_protocol="SASL_SSL",
                                    ssl_cafile=str(pki["ca"].ca_file), sasl_mechanism="PLAIN",
                                    sasl_plain_username="alice", sasl_plain_password="wrong", max_block_ms=3000)
        wrong.send(topic, b"no", partition=0).get(10)
    assert "User:carol logged in" in b.log_text() and "failed login from /127.0.0.1" in b.log_text()
    node_modules = nodejs.installed(KAFKAJS)
    run = nodejs.run(node_modules, "kafkajs_sasl.js", b.bootstrap, topic_name("sasl-ssl-js"), "100",
                     "plain:alice:alice-secret", "scram-sha-512:carol:carol-512", env={"HPBROKER_CA": str(
                         pki["ca"].ca_file)})
    assert run["read"] == {"plain": 100, "scram-sha-512": 100}
    assert run["refused"] == "KafkaJSSASLAuthenticationError"


# --- restarts and kills -------------------------------------------------------------------
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_producers_over_tls_lose_nothing_across_a_restart(broker_factory, pki, how):
    overrides = {**broker_settings(pki["ca"], pki["broker"], client_auth="required"), **COMMON}
    b = broker_factory(overrides, tls=pki["ca"].client_context(pki["alice"]))
    topic = topic_name("tls-restart")
    acked = produce_through_a_restart(b, topic, how, ck_conf(b.bootstrap, pki["ca"], pki["alice"]),
                                      kp_conf(pki, "alice"))
    assert len(acked["kp"]) > 1000, "kafka-python shook hands again and got most records through"
    assert_acknowledged_once(stored(b.bootstrap, topic, [0, 1], **without_bootstrap(
        ck_conf("", pki["ca"], pki["alice"]))), acked["ck"] | acked["kp"])


def test_producers_over_tls_lose_nothing_when_workers_are_killed(broker_factory, pki):
    overrides = {**broker_settings(pki["ca"], pki["broker"]), **COMMON}
    b = broker_factory(overrides, num_workers=2, tls=pki["ca"].client_context())
    topic = topic_name("tls-kills")
    total = 3000
    acked = produce_through_worker_kills(
        b, topic, total, lambda client, i: b"%s-%d" % (client.encode(), i), lambda _, i: i % 2,
        linger_ms=0, pace_every=5, pace_s=0.001, ck_conf=without_bootstrap(ck_conf("", pki["ca"])),
        kp_conf=kp_conf(pki))
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    assert_acknowledged_once(stored(b.bootstrap, topic, [0, 1], **without_bootstrap(ck_conf("", pki["ca"]))),
                             acked["ck"] | acked["kp"])


# --- reload and the CLI -------------------------------------------------------------------
def served_certificate(b: Broker, context: ssl.SSLContext) -> str:
    with socket.create_connection((b.host, b.port), timeout=10) as s:
        with context.wrap_socket(s, server_hostname=b.host) as t:
            der = t.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def test_a_reload_takes_a_renewed_certificate(broker_factory, pki, tmp_path):
    """SIGHUP reads the keystore again: new connections get the renewed
    certificate, connections made before carry on; a keystore that cannot be
    read is refused and the one in use kept."""
    keystore = tmp_path / "broker.pem"
    keystore.write_bytes(pki["broker"].keystore_pem.read_bytes())
    config = tmp_path / "server.properties"
    config.write_text(f"listeners=SSL://127.0.0.1:0\nssl.keystore.location={keystore}\n")
    context = pki["ca"].client_context()
    b = broker_factory(config=config, tls=context)
    assert served_certificate(b, context).startswith("CN=broker-0,")
    before = context.wrap_socket(socket.create_connection((b.host, b.port), timeout=10), server_hostname=b.host)
    try:
        renewed = pki["ca"].issue("broker-renewed", "broker-0-renewed", hosts=("127.0.0.1",))
        keystore.write_bytes(renewed.keystore_pem.read_bytes())
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        wait_for(lambda: b.log_text().count("applied the reloaded") == b.num_workers, 30, "every worker reloaded")
        assert all(served_certificate(b, context).startswith("CN=broker-0-renewed,") for _ in range(6))
        keystore.write_bytes(b"not a keystore")
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        wait_for(lambda: "reload failed, keeping the running settings: ssl.keystore.location" in b.log_text(), 30,
                 "the broken keystore refused")
        assert b.log_text().count("applied the reloaded") == b.num_workers
        assert all(served_certificate(b, context).startswith("CN=broker-0-renewed,") for _ in range(6))
        before.sendall(struct.pack(">i", len(METADATA_V0_ALL)) + METADATA_V0_ALL)
        size = struct.unpack(">i", before.recv(4))[0]
        assert size > 8  # still served on the connection made before
    finally:
        before.close()


def hpbroker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpbroker", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_the_cli_works_over_tls_and_says_why_it_cannot(broker, pki, tmp_path):
    settings = tmp_path / "client.properties"
    settings.write_text(f"security.protocol=SSL\nssl.ca.location={pki['ca'].ca_file}\n")
    topic = topic_name("tls-cli")
    made = hpbroker("topics", "create", topic, "--partitions", "3", "--bootstrap-server", broker.bootstrap,
                    "--command-config", str(settings))
    assert made.returncode == 0, made.stderr
    listed = hpbroker("topics", "list", "--bootstrap-server", broker.bootstrap, "--command-config", str(settings))
    assert listed.returncode == 0 and topic in listed.stdout
    transactions = hpbroker("transactions", "list", "--bootstrap-server", broker.bootstrap,
                            "--command-config", str(settings))  # not through librdkafka: its own TLS
    assert transactions.returncode == 0 and transactions.stdout.split()[0] == "TRANSACTIONAL-ID", \
        transactions.stderr
    untrusted = hpbroker("transactions", "list", "--bootstrap-server", broker.bootstrap, "--command-config",
                         "security.protocol=SSL", "--timeout", "5")
    assert untrusted.returncode == 1 and "Traceback" not in untrusted.stderr
    assert "TLS handshake with" in untrusted.stderr and "certificate verify failed" in untrusted.stderr
    assert len(untrusted.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("settings, message", [
    ({"ssl.keystore.location": "/nonexistent/broker.pem"}, "ssl.keystore.location: cannot read /nonexistent"),
    ({"ssl.keystore.type": "JKS"}, "Java's JKS format is not read"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth=sometimes: expected none, requested or required"),
])
def test_a_tls_listener_that_cannot_work_stops_serve_with_one_line(tmp_path, pki, settings, message):
    merged = {**broker_settings(pki["ca"], pki["broker"]), **settings}
    args = [arg for key, value in merged.items() for arg in ("--set", f"{key}={value}")]
    done = hpbroker("serve", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", *args)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
