"""A standalone broker with Kafka's ACL authorizer: a PLAINTEXT listener
(the harness's, its clients User:ANONYMOUS) and a SASL_PLAINTEXT one where
users log in.  ACLs are made, listed and removed with confluent-kafka's
and kafka-python's admin clients and with ``hpbroker acls``; producers,
consumers, groups and transactions are let through or refused as their
ACLs say, with Kafka's error codes; the ACLs outlive SIGTERM and SIGKILL,
reach every worker, and an unreadable ACL file shuts everyone but the super
users out instead of opening the broker."""

import signal
import subprocess
import sys

import confluent_kafka as ck
import kafka
import kafka.admin
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.static.primitive import i8

from harness.acls import acl_filter
from harness.broker import REPO, Broker, free_port
from harness.sasl import ADMIN, settings as sasl_settings
from harness.waiting import wait_for
from hpbroker.cli.kafka_requests import ClientSecurity, Connection, build, request_module
from hpbroker.errors import ErrorCode
from hpbroker.security.acl_store import ACLS_FILE
from hpbroker.security.settings import Login
from tests.integration.clients import ck_consume_all, topic_name
from tests.integration.restarts import produce_through_a_restart
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


ANY = acl_filter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                 AclPermissionType.ANY)


class Setup:
    def __init__(self):
        self.port = free_port()
        sasl = sasl_settings("SASL_PLAINTEXT", **USERS)
        self.overrides = {
            "num.partitions": "2", "group.initial.rebalance.delay.ms": "0",
            **{k: v for k, v in sasl.items() if k != "listeners"},
            "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{self.port}",
            "authorizer.class.name": AUTHORIZER, "super.users": "User:admin"}

    def conf(self, user: str) -> dict:
        password = ADMIN[1] if user == ADMIN[0] else USERS[user]
        return {"bootstrap.servers": f"127.0.0.1:{self.port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}

    def admin(self, user: str = ADMIN[0]) -> AdminClient:
        return AdminClient(self.conf(user))

    def allow(self, *bindings: tuple) -> None:
        """(resource type, name, pattern, principal, operation[, permission[, host]]) made by the admin."""
        made = [AclBinding(kind, name, pattern, principal, rest[1] if len(rest) > 1 else "*", rest[0],
                           AclPermissionType.ALLOW) if len(rest) < 3 else
                AclBinding(kind, name, pattern, principal, rest[2], rest[0], rest[1])
                for kind, name, pattern, principal, *rest in bindings]
        admin = self.admin()  # kept while its futures are awaited
        for future in admin.create_acls(made).values():
            assert future.result(30) is None

    def stored(self, topic: str) -> list[bytes]:
        conf = self.conf(ADMIN[0])
        return [r.value or b"" for r in ck_consume_all(
            conf["bootstrap.servers"], topic, [0, 1], **{k: v for k, v in conf.items() if k != "bootstrap.servers"})]


@pytest.fixture(scope="module")
def setup():
    return Setup()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, setup):
    b = Broker(tmp_path_factory.mktemp("acls") / "data", overrides=setup.overrides).start()
    yield b
    b.stop()


def make_topic(setup: Setup, prefix: str) -> str:
    topic = topic_name(prefix)
    admin = setup.admin()
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    return topic


def produce_errors(conf: dict, topic: str, n: int = 1, **extra) -> list:
    """Each record's delivery error code (None: delivered).  Codes, not
    KafkaErrors: a KafkaError compared with None raises."""
    producer = ck.Producer({**conf, "message.timeout.ms": 10000, **extra})
    errors: list = []
    for i in range(n):
        producer.produce(topic, b"v-%d" % i,
                         on_delivery=lambda err, _msg: errors.append(None if err is None else err.code()))
    producer.flush(30)
    return errors


def consume_until_error_or(conf: dict, topic: str, group: str, want: int, timeout: float = 30):
    """(values read, the first error) of a group member reading ``topic`` from the start."""
    consumer = ck.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    failure: list = []
    try:
        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                failure.append(message.error())
            elif message is not None:
                seen.append(message.value() or b"")
            return bool(failure) or len(seen) >= want
        wait_for(read, timeout, f"a member of {group} to read {want} records or fail")
        if not failure:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen, (failure[0] if failure else None)


def test_without_acls_only_super_users_act(broker, setup):
    topic = make_topic(setup, "closed")
    listed = setup.admin("alice").list_topics(topic, timeout=30).topics[topic]
    assert listed.error is not None and listed.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert topic not in setup.admin("alice").list_topics(timeout=30).topics  # a listing leaves it out
    assert topic in setup.admin().list_topics(timeout=30).topics
    assert produce_errors(setup.conf("alice"), topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    alice = setup.admin("alice")
    refused = alice.create_acls([AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
        AclPermissionType.ALLOW)])
    with pytest.raises(KafkaException) as caught:
        next(iter(refused.values())).result(30)
    assert caught.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    anonymous = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            anonymous.describe_acls(kafka.admin.ACLFilter(
                principal=None, host="*", operation=kafka.admin.ACLOperation.ANY,
                permission_type=kafka.admin.ACLPermissionType.ANY,
                resource_pattern=kafka.admin.ResourcePatternFilter(kafka.admin.ResourceType.ANY, None,
                                                                   kafka.admin.ACLResourcePatternType.ANY)))
    finally:
        anonymous.close()
    # the producer learned it from Metadata: alice may not even describe the topic
    assert "Principal = User:alice is Denied Operation = Describe from host = 127.0.0.1 on resource = " \
           f"Topic:LITERAL:{topic}" in broker.log_text()


def test_acls_are_made_listed_and_removed_by_both_admin_clients(broker, setup):
    admin = setup.admin()
    topic = topic_name("listed")
    literal = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.TOPIC, topic[:6], ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                          AclOperation.ALL, AclPermissionType.DENY)
    cluster = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:carol", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    wrong = AclBinding(ResourceType.BROKER, "my-cluster", ResourcePatternType.LITERAL, "User:carol", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    made = admin.create_acls([literal, prefixed, cluster, wrong])
    for binding in (literal, prefixed, cluster):
        assert made[binding].result(30) is None
    with pytest.raises(KafkaException) as caught:
        made[wrong].result(30)
    assert caught.value.args[0].code() == KafkaError.INVALID_REQUEST

    matching = acl_filter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                          AclPermissionType.ANY)
    assert sorted(map(str, admin.describe_acls(matching).result(30))) == sorted(map(str, [literal, prefixed]))
    assert {str(b) for b in (literal, prefixed, cluster)} <= set(map(str, admin.describe_acls(ANY).result(30)))

    # kafka-python's admin sees and makes the same
    kp = kafka.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{setup.port}", security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])
    try:
        group_acl = kafka.admin.ACL(principal="User:bob", host="*", operation=kafka.admin.ACLOperation.READ,
                                    permission_type=kafka.admin.ACLPermissionType.ALLOW,
                                    resource_pattern=kafka.admin.ResourcePattern(kafka.admin.ResourceType.GROUP,
                                                                                 f"{topic}-g"))
        result = kp.create_acls([group_acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        found, error = kp.describe_acls(kafka.admin.ACLFilter(
            principal="User:bob", host="*", operation=kafka.admin.ACLOperation.ANY,
            permission_type=kafka.admin.ACLPermissionType.ANY,
            resource_pattern=kafka.admin.ResourcePatternFilter(kafka.admin.ResourceType.GROUP, f"{topic}-g",
                                                               kafka.admin.ACLResourcePatternType.LITERAL)))
        assert error is kafka.errors.NoError and [a.resource_pattern.resource_name for a in found] == [f"{topic}-g"]
    finally:
        kp.close()

    removing = acl_filter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                          AclOperation.ANY, AclPermissionType.ANY)
    removed = admin.delete_acls([removing])[removing].result(30)
    assert {(b.name, b.principal) for b in removed} == {(topic[:6], "User:bob"), (f"{topic}-g", "User:bob")}
    assert "User:bob" not in {b.principal for b in admin.describe_acls(ANY).result(30)}


def test_clients_do_what_their_acls_allow_and_deny_wins(broker, setup):
    topic = make_topic(setup, "orders")
    group = f"{topic}-billing"
    setup.allow((ResourceType.TOPIC, topic[:8], ResourcePatternType.PREFIXED, "User:alice", AclOperation.WRITE),
                (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", AclOperation.READ),
                (ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:bob", AclOperation.READ))
    # an idempotent producer needs WRITE on some topic (or IDEMPOTENT_WRITE on the cluster): alice has it
    assert produce_errors(setup.conf("alice"), topic, 200, **{"enable.idempotence": True}) == [None] * 200
    assert [t for t in setup.admin("alice").list_topics(timeout=30).topics] == [topic]  # WRITE implies DESCRIBE
    seen, failure = consume_until_error_or(setup.conf("bob"), topic, group, 200)
    assert failure is None and len(seen) == 200
    assert produce_errors(setup.conf("bob"), topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    _, failure = consume_until_error_or(setup.conf("alice"), topic, f"{topic}-alice", 1)
    assert failure is not None and failure.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # a DENY from bob's address wins over his ALLOW
    setup.allow((ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", AclOperation.READ,
                 AclPermissionType.DENY, "127.0.0.1"))
    producer_errors = produce_errors(setup.conf("alice"), topic, 10)
    assert producer_errors == [None] * 10
    _, failure = consume_until_error_or(setup.conf("bob"), topic, group, 1)
    assert failure is not None and failure.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_transactional_producer_needs_write_on_its_transactional_id(broker, setup):
    topic = make_topic(setup, "txn")
    transactional_id = f"{topic}-tx"
    setup.allow((ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", AclOperation.WRITE))
    producer = ck.Producer({**setup.conf("carol"), "transactional.id": transactional_id})
    with pytest.raises(KafkaException) as caught:
        producer.init_transactions(30)
    assert caught.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    setup.allow((ResourceType.TRANSACTIONAL_ID, transactional_id, ResourcePatternType.LITERAL, "User:carol",
                 AclOperation.WRITE))
    producer = ck.Producer({**setup.conf("carol"), "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, b"t-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    seen, failure = consume_until_error_or({**setup.conf(ADMIN[0]), "isolation.level": "read_committed"}, topic,
                                           f"{topic}-reader", 20)
    assert failure is None and sorted(seen) == sorted(b"t-%d" % i for i in range(20))


def test_an_acl_made_through_one_worker_holds_on_every_worker(broker_factory, setup):
    """Fresh connections land on either worker; each decides by the change at once."""
    b = broker_factory({**setup.overrides, "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:"
                                                        f"{(port := free_port())}"}, num_workers=2)
    conf = {**setup.conf("alice"), "bootstrap.servers": f"127.0.0.1:{port}"}
    admin = AdminClient({**setup.conf(ADMIN[0]), "bootstrap.servers": f"127.0.0.1:{port}"})
    topic = topic_name("everywhere")
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    for round_ in range(3):
        made = admin.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                                             "*", AclOperation.WRITE, AclPermissionType.ALLOW)])
        assert next(iter(made.values())).result(30) is None
        for _ in range(4):
            assert produce_errors(conf, topic) == [None], f"round {round_}"
        removing = acl_filter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", None,
                              AclOperation.ANY, AclPermissionType.ANY)
        assert len(admin.delete_acls([removing])[removing].result(30)) == 1
        for _ in range(4):
            assert produce_errors(conf, topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert len(b.worker_pids()) == 2


def _producing_setup(setup: Setup, b: Broker, topic: str) -> None:
    """alice (librdkafka, SASL) and anyone on this machine's PLAINTEXT listener
    (kafka-python, User:ANONYMOUS) may write ``topic``."""
    admin = AdminClient({**setup.conf(ADMIN[0])})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    made = admin.create_acls([
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "127.0.0.1",
                   AclOperation.WRITE, AclPermissionType.ALLOW)])
    for future in made.values():
        assert future.result(30) is None


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_acls_outlive_a_restart_under_producers(broker_factory, how):
    setup = Setup()
    b = broker_factory(setup.overrides)
    topic = topic_name("acl-restart")
    _producing_setup(setup, b, topic)
    acked = produce_through_a_restart(b, topic, how, setup.conf("alice"), {})
    assert len(acked["kp"]) > 1000 and len(acked["ck"]) > 1000, "both got most records through"
    assert_acknowledged_once(setup.stored(topic), acked["ck"] | acked["kp"])
    admin = setup.admin()
    listed = admin.describe_acls(ANY).result(30)
    assert {(x.principal, x.operation) for x in listed} == {("User:alice", AclOperation.WRITE),
                                                          ("User:ANONYMOUS", AclOperation.WRITE)}
    assert produce_errors(setup.conf("bob"), topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_acls_hold_while_workers_are_killed(broker_factory):
    setup = Setup()
    b = broker_factory(setup.overrides, num_workers=2)
    topic = topic_name("acl-kills")
    _producing_setup(setup, b, topic)
    total = 3000
    acked = produce_through_worker_kills(
        b, topic, total, lambda client, i: b"%s-%d" % (client.encode(), i), lambda _, i: i % 2,
        linger_ms=0, pace_every=5, pace_s=0.001, ck_conf=setup.conf("alice"))
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    assert_acknowledged_once(setup.stored(topic), acked["ck"] | acked["kp"])
    assert produce_errors(setup.conf("bob"), topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_an_unreadable_acl_file_shuts_out_everyone_but_the_super_users(broker_factory):
    setup = Setup()
    b = broker_factory(setup.overrides)
    topic = topic_name("acl-file")
    _producing_setup(setup, b, topic)
    assert produce_errors(setup.conf("alice"), topic) == [None]
    b.stop()
    path = b.data_dir / ACLS_FILE
    good = path.read_text()
    path.write_text(good[: len(good) // 2])  # torn
    b.start()
    assert produce_errors(setup.conf("alice"), topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert produce_errors(setup.conf(ADMIN[0]), topic) == [None]  # the super user still works
    assert "denying everyone but the super users until the ACLs can be read" in b.log_text(since_start=True)
    path.write_text(good)  # mended: read again at the next decision, no restart
    wait_for(lambda: produce_errors(setup.conf("alice"), topic) == [None], 30, "alice to be let in again")


def test_acl_requests_kafka_refuses_are_answered_invalid_request(broker, setup):
    """UNKNOWN codes in a filter or a creation: INVALID_REQUEST, the connection serving on."""
    conn = Connection("127.0.0.1", setup.port, 10, ClientSecurity(login=Login("PLAIN", *ADMIN)))
    try:
        m = request_module(29, 3)
        answer = conn.request(build(m.DescribeAclsRequest, resource_type_filter=i8(0), resource_name_filter=None,
                                    pattern_type_filter=i8(1), principal_filter=None, host_filter=None,
                                    operation=i8(1), permission_type=i8(1)))
        assert answer.error_code == ErrorCode.invalid_request
        m = request_module(30, 3)
        answer = conn.request(build(m.CreateAclsRequest, creations=(
            build(m.AclCreation, resource_type=i8(99), resource_name="t", resource_pattern_type=i8(3),
                  principal="User:x", host="*", operation=i8(3), permission_type=i8(3)),
            build(m.AclCreation, resource_type=i8(2), resource_name="t", resource_pattern_type=i8(3),
                  principal="x", host="*", operation=i8(3), permission_type=i8(3)))))
        assert [r.error_code for r in answer.results] == [ErrorCode.invalid_request] * 2
        m = request_module(29, 3)
        answer = conn.request(build(m.DescribeAclsRequest, resource_type_filter=i8(1), resource_name_filter=None,
                                    pattern_type_filter=i8(1), principal_filter="User:x", host_filter=None,
                                    operation=i8(1), permission_type=i8(1)))
        assert answer.error_code == ErrorCode.none and answer.resources == ()
    finally:
        conn.close()


def test_a_broker_without_an_authorizer_says_security_disabled(broker_factory):
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    made = admin.create_acls([AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*",
                                         AclOperation.READ, AclPermissionType.ALLOW)])
    with pytest.raises(KafkaException) as caught:
        next(iter(made.values())).result(30)
    assert caught.value.args[0].code() == KafkaError.SECURITY_DISABLED
    done = subprocess.run([sys.executable, "-m", "hpbroker", "acls", "list", "--bootstrap-server", b.bootstrap],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("hpbroker acls: security disabled: No Authorizer is configured on the broker "
                                   "(authorizer.class.name)")


def test_the_acls_command_adds_lists_and_removes(broker, setup, tmp_path):
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\n")
    topic = topic_name("cli")

    def hpbroker(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hpbroker", "acls", *args, "--bootstrap-server",
                               f"127.0.0.1:{setup.port}", "--command-config", str(config)],
                              cwd=REPO, capture_output=True, text=True, timeout=60)

    added = hpbroker("add", "--allow-principal", "User:dave", "--consumer", "--topic", topic, "--group", topic)
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines() == [f"added: User:dave ALLOW READ on Topic {topic} from *",
                                         f"added: User:dave ALLOW DESCRIBE on Topic {topic} from *",
                                         f"added: User:dave ALLOW READ on Group {topic} from *"]
    listed = hpbroker("list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    assert rows[1:] == [["Topic", topic, "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW"],
                        ["Topic", topic, "LITERAL", "User:dave", "*", "READ", "ALLOW"]]
    removed = hpbroker("remove", "--topic", topic, "--group", topic)
    assert removed.returncode == 0 and len(removed.stdout.splitlines()) == 3, removed.stdout
    bad = hpbroker("add", "--allow-principal", "dave", "--operation", "Read", "--topic", topic)
    assert bad.returncode == 1 and bad.stderr.strip() == \
        "hpbroker acls: principal 'dave': expected Type:name, e.g. User:dave"
    # an operation the resource has not: refused before anything is sent, nothing made
    bad = hpbroker("add", "--allow-principal", "User:dave", "--operation", "Write", "--topic", topic, "--group", topic)
    assert bad.returncode == 1 and bad.stderr.strip() == \
        f"hpbroker acls: group '{topic}' has no operation WRITE (it has READ, DESCRIBE, DELETE, and ALL)"
    assert hpbroker("list", "--topic", topic).stdout.splitlines()[1:] == []
