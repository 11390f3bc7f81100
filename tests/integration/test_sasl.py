"""A broker whose listener is SASL_PLAINTEXT, standalone, with the clients
people use: librdkafka, kafka-python and aiokafka log in with PLAIN (users
in the listener's JAAS entry) and SCRAM-SHA-256/512 (credentials made with
AlterUserScramCredentials and kept in the log dir); wrong passwords and
unknown users are refused while everyone else is served; nothing but
ApiVersions is answered before the login; bare tokens after a v0 handshake;
malformed tokens; the broker SIGTERMed, SIGKILLed and its workers SIGKILLed
under logged-in idempotent producers; and ``hpbroker users``."""

import json
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import confluent_kafka as ck
import kafka
import kafka.errors
import pytest

from harness.broker import REPO, Broker, plain_login
from harness.sasl import ADMIN, add_scram_user, ck_conf, settings as sasl_settings
from harness.waiting import wait_for
from hpbroker.security import scram
from tests.integration import node as nodejs
from tests.integration.clients import ck_consume_all, python_clients_round_trip, topic_name
from tests.integration.restarts import produce_through_a_restart
from tests.integration.test_kafkajs import KAFKAJS
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

SETTINGS = {**sasl_settings(alice="alice-secret"), "num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}
LOGINS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("carol", "carol-256"),
          "SCRAM-SHA-512": ("carol", "carol-512")}


def kp_conf(mechanism: str, user: str, password: str) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


def add_scram_users(bootstrap: str) -> None:
    add_scram_user(bootstrap, "carol", {"SCRAM-SHA-256": (b"carol-256", 4096), "SCRAM-SHA-512": (b"carol-512", 8192)})


def start(broker_factory, **kw) -> Broker:
    return broker_factory(SETTINGS, login=ADMIN, **kw)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("sasl") / "data", overrides=SETTINGS, login=ADMIN).start()
    add_scram_users(b.bootstrap)
    yield b
    b.stop()


def stored(bootstrap: str, topic: str, partitions, login=("PLAIN", *ADMIN)) -> list[bytes]:
    """Every record below the high watermarks."""
    conf = {k: v for k, v in ck_conf(bootstrap, *login).items() if k != "bootstrap.servers"}
    return [r.value or b"" for r in ck_consume_all(bootstrap, topic, partitions, **conf)]


@pytest.mark.parametrize("mechanism", sorted(LOGINS))
def test_librdkafka_logs_in_produces_and_reads_in_a_group(broker, mechanism):
    topic = topic_name("sasl-ck")
    conf = ck_conf(broker.bootstrap, mechanism, *LOGINS[mechanism])
    producer = ck.Producer({**conf, "enable.idempotence": True})
    for i in range(200):
        producer.produce(topic, b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    try:
        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value() or b"")
            return len(seen) == 200
        wait_for(read, 30, "every record read in the group")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", sorted(LOGINS))
def test_kafka_python_and_aiokafka_log_in_too(broker, mechanism):
    topic = topic_name("sasl-py")
    conf = kp_conf(mechanism, *LOGINS[mechanism])
    values = python_clients_round_trip(broker.bootstrap, topic, conf, conf)
    assert sorted(values) == sorted([b"kp-%d" % i for i in range(50)] + [b"ak-%d" % i for i in range(50)])


def test_wrong_logins_are_refused_while_others_are_served(broker):
    topic = topic_name("sasl-refused")
    refusals: list[tuple[int, ck.KafkaError]] = []
    wrong = [ck_conf(broker.bootstrap, "PLAIN", "alice", "nope"), ck_conf(broker.bootstrap, "PLAIN", "mallory", "x"),
             ck_conf(broker.bootstrap, "SCRAM-SHA-256", "carol", "carol-512"),
             ck_conf(broker.bootstrap, "SCRAM-SHA-512", "nobody", "x")]
    producers = [ck.Producer({**conf, "error_cb": lambda e, n=n: refusals.append((n, e))})
                 for n, conf in enumerate(wrong)]
    good = ck.Producer(ck_conf(broker.bootstrap, "SCRAM-SHA-512", *LOGINS["SCRAM-SHA-512"]))
    for i in range(100):
        good.produce(topic, b"%d" % i, partition=0)
    assert good.flush(30) == 0

    def each_refused() -> bool:
        for producer in producers:
            producer.poll(0.1)
        return {n for n, e in refusals if e.code() == ck.KafkaError._AUTHENTICATION} == set(range(len(wrong)))
    wait_for(each_refused, 30, "every wrong login to be refused")
    assert all("Authentication failed" in e.str() for _, e in refusals if e.code() == ck.KafkaError._AUTHENTICATION)
    with pytest.raises(kafka.errors.KafkaError):
        # api_version given: probing it would retry the refused login for 30 s before failing
        kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=3000, api_version=(3, 0),
                            **kp_conf("SCRAM-SHA-256", "carol", "wrong")).send(topic, b"never").get(5)
    assert sorted(stored(broker.bootstrap, topic, [0])) == sorted(b"%d" % i for i in range(100))
    assert "failed login from /127.0.0.1" in broker.log_text()


# --- the wire, by hand ---------------------------------------------------------------
def frame(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    data = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test" + body
    return struct.pack(">i", len(data)) + data


def answer(s: socket.socket) -> bytes:
    """One answer's body after the correlation id; b"" when the broker closed the connection."""
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return b""
    size = struct.unpack(">i", head)[0]
    return s.recv(size, socket.MSG_WAITALL)[4:]


def closed(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def string(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


METADATA_V0_ALL = struct.pack(">i", 0)  # no topics named: all of them


def test_only_api_versions_is_answered_before_the_login(broker):
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(18, 0, b""))
        versions = answer(s)
        count = struct.unpack_from(">i", versions, 2)[0]
        keys = {struct.unpack_from(">h", versions, 6 + 6 * i)[0] for i in range(count)}
        assert {17, 36, 50, 51} <= keys
        s.sendall(frame(3, 0, METADATA_V0_ALL))
        assert closed(s)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(36, 0, struct.pack(">i", 4) + b"abcd"))  # tokens before a handshake
        assert struct.unpack_from(">h", answer(s))[0] == 34  # ILLEGAL_SASL_STATE
        assert closed(s)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(17, 1, string(b"GSSAPI")))
        refused = answer(s)
        assert struct.unpack_from(">h", refused)[0] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert b"SCRAM-SHA-512" in refused  # the mechanisms there are
        assert closed(s)
    assert "before the SASL login" in broker.log_text()


def test_before_the_login_a_frame_is_small_and_a_refusal_slow(broker):
    """Kafka's sasl.server.max.receive.size (512 KiB): a stranger cannot make a
    worker hold socket.request.max.bytes for it; and each refused password
    waits connection.failed.authentication.delay.ms (100 ms) for its answer.
    Once logged in, a request may be as large as any."""
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", 600 * 1024) + b"\x00" * 64)  # a frame over the limit, announced
        assert closed(s)
    assert "exceeds sasl.server.max.receive.size=524288" in broker.log_text()
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        started = time.monotonic()
        assert not plain_login(s, "alice", "wrong")
        assert time.monotonic() - started >= 0.1
    topic = topic_name("sasl-large")
    producer = ck.Producer({**ck_conf(broker.bootstrap, "PLAIN", *LOGINS["PLAIN"]), "message.max.bytes": 2_000_000})
    producer.produce(topic, b"x" * 900_000, partition=0)
    assert producer.flush(30) == 0
    assert stored(broker.bootstrap, topic, [0]) == [b"x" * 900_000]


def test_a_v0_handshake_takes_bare_tokens(broker):
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(17, 0, string(b"PLAIN")))
        assert struct.unpack_from(">h", answer(s))[0] == 0
        token = b"\x00alice\x00alice-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert s.recv(4, socket.MSG_WAITALL) == b"\x00\x00\x00\x00"  # an empty token: logged in
        s.sendall(frame(3, 0, METADATA_V0_ALL, correlation_id=2))
        assert struct.unpack_from(">i", answer(s))[0] == 1  # one broker
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(17, 0, string(b"SCRAM-SHA-256")))
        assert struct.unpack_from(">h", answer(s))[0] == 0
        client = scram.ScramClient("SCRAM-SHA-256", "carol", "carol-256")

        def exchange(token: bytes) -> bytes:
            s.sendall(struct.pack(">i", len(token)) + token)
            return s.recv(struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0], socket.MSG_WAITALL)
        client.check(exchange(client.final(exchange(client.first()))))
        s.sendall(frame(3, 0, METADATA_V0_ALL))
        assert struct.unpack_from(">i", answer(s))[0] == 1
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(17, 0, string(b"PLAIN")))
        answer(s)
        wrong = b"\x00alice\x00x"
        s.sendall(struct.pack(">i", len(wrong)) + wrong)
        assert closed(s)  # a bare token's refusal is the connection closing


@pytest.mark.parametrize("mechanism, token", [
    (b"PLAIN", b""), (b"PLAIN", b"\xff" * 64), (b"PLAIN", b"\x00" * 5000),
    (b"SCRAM-SHA-256", b"n,,n=carol"), (b"SCRAM-SHA-256", b"\xc3\x28garbage"),
    (b"SCRAM-SHA-512", b"p=tls-server-end-point,,n=carol,r=x"), (b"SCRAM-SHA-512", b"n,,n=carol,r=" + b"A" * 100000),
])
def test_malformed_tokens_fail_the_login_and_only_it(broker, mechanism, token):
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(17, 1, string(mechanism)))
        assert struct.unpack_from(">h", answer(s))[0] == 0
        s.sendall(frame(36, 1, struct.pack(">i", len(token)) + token))
        reply = answer(s)
        if mechanism != b"SCRAM-SHA-512" or not token.endswith(b"A"):  # a long nonce is still a nonce
            assert struct.unpack_from(">h", reply)[0] == 58  # SASL_AUTHENTICATION_FAILED
            assert closed(s)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame(17, 1, string(b"PLAIN")))
        answer(s)
        s.sendall(frame(36, 1, b"\x00\x00"))  # a SaslAuthenticate body cut short: malformed
        assert closed(s)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        assert plain_login(s, "alice", "alice-secret")  # and everyone else carries on


# --- faults ---------------------------------------------------------------------------
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_logged_in_producers_lose_nothing_across_a_restart(broker_factory, how):
    b = start(broker_factory)
    add_scram_users(b.bootstrap)
    topic = topic_name("sasl-restart")
    acked = produce_through_a_restart(b, topic, how, ck_conf(b.bootstrap, "SCRAM-SHA-512", *LOGINS["SCRAM-SHA-512"]),
                                      kp_conf("PLAIN", *LOGINS["PLAIN"]))
    assert len(acked["kp"]) > 1000, "kafka-python logged in again and got most records through"
    assert_acknowledged_once(stored(b.bootstrap, topic, [0, 1]), acked["ck"] | acked["kp"])
    log = b.log_text(since_start=True)
    assert "User:carol logged in" in log and "User:alice logged in" in log  # the SCRAM user outlived the restart


def test_logged_in_producers_lose_nothing_when_workers_are_killed(broker_factory):
    b = start(broker_factory, num_workers=2)
    add_scram_users(b.bootstrap)
    topic = topic_name("sasl-kills")
    total = 3000
    acked = produce_through_worker_kills(
        b, topic, total, lambda client, i: b"%s-%d" % (client.encode(), i), lambda _, i: i % 2,
        linger_ms=0, pace_every=5, pace_s=0.001,
        ck_conf={k: v for k, v in ck_conf("", "SCRAM-SHA-256", *LOGINS["SCRAM-SHA-256"]).items()
                 if k != "bootstrap.servers"},
        kp_conf=kp_conf("PLAIN", *LOGINS["PLAIN"]))
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    assert_acknowledged_once(stored(b.bootstrap, topic, [0, 1]), acked["ck"] | acked["kp"])


# --- the CLI ------------------------------------------------------------------------------
def hpbroker(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpbroker", *args], cwd=REPO, input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_hpbroker_users_sets_lists_and_deletes_credentials(broker, tmp_path):
    login = ["--bootstrap-server", broker.bootstrap, "--command-config", "security.protocol=SASL_PLAINTEXT",
             "--command-config", "sasl.mechanism=PLAIN", "--command-config", "sasl.username=admin",
             "--command-config", "sasl.password=admin-secret"]
    done = hpbroker("users", "set-password", "dave", "--mechanism", "scram-sha-256", *login, stdin="dave-pw\n")
    assert done.returncode == 0 and done.stdout.strip() == "set SCRAM-SHA-256 for dave", done.stderr
    listed = hpbroker("users", "list", "--json", *login)
    assert {"user": "dave", "mechanism": "SCRAM-SHA-256", "iterations": 8192} in json.loads(listed.stdout)
    table = hpbroker("users", "list", *login).stdout.splitlines()
    assert table[0].split() == ["USER", "MECHANISM", "ITERATIONS"] and any(line.split()[0] == "dave" for line in table)

    producer = ck.Producer({**ck_conf(broker.bootstrap, "SCRAM-SHA-256", "dave", "dave-pw")})
    producer.produce(topic_name("sasl-cli"), b"by dave")
    assert producer.flush(30) == 0

    assert hpbroker("users", "delete", "dave", *login).stdout.strip() == "deleted SCRAM-SHA-256 for dave"
    gone = hpbroker("users", "delete", "dave", *login)
    assert gone.returncode == 1 and gone.stderr.startswith(
        "hpbroker users: dave: Attempt to describe a user credential that does not exist")
    assert len(gone.stderr.strip().splitlines()) == 1
    bad = hpbroker("users", "set-password", "eve", "--iterations", "100", *login, stdin="x\n")
    assert bad.returncode == 1 and "4096-16384" in bad.stderr and "Traceback" not in bad.stderr

    properties = tmp_path / "client.properties"  # the password off the command line, as Kafka's tools take it
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                          "sasl.password=admin-secret\n")
    from_file = hpbroker("users", "list", "--bootstrap-server", broker.bootstrap, "--command-config", str(properties))
    assert from_file.returncode == 0 and from_file.stdout.split()[:3] == ["USER", "MECHANISM", "ITERATIONS"]

    refused = hpbroker("users", "list", *login[:-1], "sasl.password=wrong", "--timeout", "5")
    assert refused.returncode == 1 and "refused the login" in refused.stderr and "Traceback" not in refused.stderr
    scram_login = login[:4] + ["--command-config", "sasl.mechanism=SCRAM-SHA-512", "--command-config",
                               "sasl.username=carol", "--command-config", "sasl.password=carol-512"]
    listed = hpbroker("transactions", "list", *scram_login)  # not through librdkafka: its own login
    assert listed.returncode == 0 and listed.stdout.split()[0] == "TRANSACTIONAL-ID", listed.stderr


def test_a_listener_that_cannot_work_stops_serve_with_one_line(tmp_path):
    done = hpbroker("serve", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", "--set",
                    "listeners=SASL_SSL://127.0.0.1:0")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("hpbroker serve: listener SASL_SSL serves TLS: set ssl.keystore.location")
    assert "\n" not in done.stderr.strip()


# --- more clients -------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_logs_in_with_each_mechanism(broker):
    """Debian's kcat (librdkafka 2.0.2), whose SCRAM repeats its own nonce: taken, as Kafka takes it."""
    topic = topic_name("sasl-kcat")
    for mechanism, (user, password) in sorted(LOGINS.items()):
        login = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
                 "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", *login],
                       input=f"by {mechanism}\n", text=True, check=True, timeout=60)
        read = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-e", "-q", *login],
                              capture_output=True, text=True, check=True, timeout=60)
        assert f"by {mechanism}" in read.stdout.splitlines()


def test_kafkajs_logs_in_with_each_mechanism(broker):
    node_modules = nodejs.installed(KAFKAJS)
    logins = [f"{m.lower()}:{user}:{password}" for m, (user, password) in sorted(LOGINS.items())]
    run = nodejs.run(node_modules, "kafkajs_sasl.js", broker.bootstrap, topic_name("sasl-js"), "100", *logins)
    assert run["read"] == {m.lower(): 100 for m in LOGINS}
    assert run["refused"] == "KafkaJSSASLAuthenticationError"


def test_a_reload_changes_plain_users_for_new_logins(broker_factory, tmp_path):
    """SIGHUP (systemctl reload) reads the listener's JAAS entry again: a PLAIN
    user added there logs in, one removed no longer does; connections already
    logged in carry on."""
    config = tmp_path / "server.properties"

    def write(users: str) -> None:
        config.write_text("listeners=SASL_PLAINTEXT://127.0.0.1:0\n"
                          "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                          "org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                          f"    {users};\n")
    write('user_admin="admin-secret" user_alice="alice-secret"')
    b = broker_factory(login=ADMIN, config=config)

    def logs_in(user: str, password: str) -> bool:
        with socket.create_connection((b.host, b.port), timeout=10) as s:
            try:
                return plain_login(s, user, password)
            except (OSError, struct.error):
                return False
    alice = socket.create_connection((b.host, b.port), timeout=10)
    try:
        assert plain_login(alice, "alice", "alice-secret") and not logs_in("bob", "bob-secret")
        write('user_admin="admin-secret" user_bob="bob-secret"')
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        wait_for(lambda: logs_in("bob", "bob-secret"), 30, "bob to log in after the reload")
        assert not logs_in("alice", "alice-secret")
        alice.sendall(frame(3, 0, METADATA_V0_ALL))
        assert struct.unpack_from(">i", answer(alice))[0] == 1  # still served
    finally:
        alice.close()
