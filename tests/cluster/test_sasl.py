"""Three brokers on SASL listeners: they log in to each other (PLAIN, the
broker's own user from the listener's JAAS entry), clients log in with SCRAM
credentials kept in ZooKeeper where Kafka keeps them, and acks=all writes
survive their partition leader's SIGKILL.  A broker whose own login is wrong
cannot follow, and says why."""

import json

import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from harness.cluster import Cluster
from harness.waiting import wait_for
from hpbroker.cluster import znodes
from tests.cluster.leader_kill import write_through_a_leader_kill

TOPIC, PARTITIONS = "ledger", 3
ADMIN = ("broker", "broker-secret")
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_ops="ops-secret";')
SASL_SETTINGS = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "min.insync.replicas": "2",
                 "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}


def client(bootstrap: str, mechanism: str, user: str, password: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **extra}


@pytest.fixture
def cluster(zookeeper, chroot, tmp_path):
    found = Cluster(chroot, tmp_path, 3, overrides=SASL_SETTINGS, login=ADMIN)
    found.start_all()
    yield found
    found.close()


def test_brokers_log_in_to_each_other_and_scram_users_survive_a_leader_kill(cluster):
    registration = json.loads(cluster.zk.get(znodes.broker_path(1))[0])
    assert registration["endpoints"][0].startswith("SASL_PLAINTEXT://")
    assert registration["listener_security_protocol_map"] == {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}

    admin = AdminClient(client(cluster.bootstrap, "PLAIN", "ops", "ops-secret"))
    upsert = UserScramCredentialUpsertion("writer", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"writer-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        assert future.result(30) is None
    stored = json.loads(cluster.zk.get("/config/users/writer")[0])
    assert set(stored["config"]) == {"SCRAM-SHA-512"} and "salt=" in stored["config"]["SCRAM-SHA-512"]
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    cluster.wait_in_sync(TOPIC, PARTITIONS)  # the followers logged in to fetch

    writer = client(cluster.bootstrap, "SCRAM-SHA-512", "writer", "writer-secret")
    victim = write_through_a_leader_kill(cluster, TOPIC, PARTITIONS, writer)
    cluster.start(victim)  # back, it logs in to the new leaders and catches up
    cluster.wait_in_sync(TOPIC, PARTITIONS)


def test_a_broker_with_a_wrong_login_cannot_follow_and_says_so(zookeeper, chroot, tmp_path):
    cluster = Cluster(chroot, tmp_path, 2, overrides=SASL_SETTINGS, login=ADMIN)
    wrong = JAAS.replace('password="broker-secret"', 'password="stale"', 1)
    cluster.brokers[2].overrides["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = wrong
    try:
        cluster.start_all()
        admin = AdminClient(client(cluster.bootstrap, "PLAIN", "ops", "ops-secret"))
        admin.create_topics([NewTopic(TOPIC, 2, -1, replica_assignment=[[1, 2], [2, 1]])])[TOPIC].result(30)
        wait_for(lambda: "refused" in cluster.brokers[2].log_text() and "SASL" in cluster.brokers[2].log_text(), 60,
                 "broker 2 to log that its login was refused")
        assert "failed login" in cluster.brokers[1].log_text()
        assert cluster.leader_of(TOPIC, 0) == 1  # its preferred leader
        wait_for(lambda: cluster.state(TOPIC, 0).isr == [1], 60, "the replica that cannot log in to leave the ISR")
    finally:
        cluster.close()
