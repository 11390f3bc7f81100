"""Three brokers on SSL listeners that ask for client certificates (mutual
TLS): brokers follow each other over TLS, checking the host name each
connects to against the peer's certificate, and acks=all writes of clients
with certificates survive their partition leader's SIGKILL.  A broker whose
certificate the others do not trust cannot follow, and says why."""

import json

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import Cluster
from harness.tls import Authority, ck_conf
from harness.waiting import wait_for
from hpbroker.cluster import znodes

TOPIC, PARTITIONS = "ledger", 3


def settings(authority: Authority, keystore) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0", "min.insync.replicas": "2", "ssl.client.auth": "required",
            "ssl.keystore.location": str(keystore.keystore_pem), "ssl.truststore.location": str(authority.ca_file)}


@pytest.fixture
def pki(tmp_path):
    authority = Authority(tmp_path / "pki")
    return authority, authority.issue("broker", "broker", hosts=("127.0.0.1",)), authority.issue("client", "client")


def test_brokers_follow_each_other_over_mutual_tls_and_survive_a_leader_kill(zookeeper, chroot, tmp_path, pki):
    authority, broker, client = pki
    cluster = Cluster(chroot, tmp_path, 3, overrides=settings(authority, broker),
                      tls=authority.client_context(client))
    try:
        cluster.start_all()
        registration = json.loads(cluster.zk.get(znodes.broker_path(1))[0])
        assert registration["endpoints"][0].startswith("SSL://")
        assert registration["listener_security_protocol_map"] == {"SSL": "SSL"}
        conf = ck_conf(cluster.bootstrap, authority, client)
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        cluster.wait_in_sync(TOPIC, PARTITIONS)  # the followers shook hands to fetch

        acked: set[bytes] = set()

        def produce(start: int, count: int) -> None:
            producer = ck.Producer({**conf, "acks": "all", "enable.idempotence": True})

            def delivered(err, msg):
                if err is None:
                    acked.add(msg.value())
            for n in range(start, start + count):
                producer.produce(TOPIC, b"%d" % n, partition=n % PARTITIONS, on_delivery=delivered)
            assert producer.flush(60) == 0

        produce(0, 600)
        victim = cluster.leader_of(TOPIC, 0)
        cluster.kill(victim)
        wait_for(lambda: cluster.leader_of(TOPIC, 0) != victim, 60, "a new leader of partition 0")
        produce(600, 600)
        assert len(acked) == 1200

        consumer = ck.Consumer({**conf, "group.id": "auditors", "auto.offset.reset": "earliest"})
        consumer.subscribe([TOPIC])
        seen: list[bytes] = []
        try:
            def read_all() -> bool:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen.append(message.value() or b"")
                return acked <= set(seen)
            wait_for(read_all, 60, "every acknowledged record to be read")
        finally:
            consumer.close()
        assert len(seen) == len(set(seen)), "a record stored twice"

        cluster.start(victim)  # back, it shakes hands with the new leaders and catches up
        cluster.wait_in_sync(TOPIC, PARTITIONS)
    finally:
        cluster.close()


def test_a_broker_the_others_do_not_trust_cannot_follow_and_says_so(zookeeper, chroot, tmp_path, pki):
    authority, broker, client = pki
    cluster = Cluster(chroot, tmp_path, 2, overrides=settings(authority, broker),
                      tls=authority.client_context(client))
    stranger = Authority(tmp_path / "other", "some other CA")
    # broker 2 trusts both authorities (it can reach broker 1) but shows a certificate broker 1 does not trust
    both = tmp_path / "both.pem"
    both.write_bytes(authority.ca_file.read_bytes() + stranger.ca_file.read_bytes())
    cluster.brokers[2].overrides.update({
        "ssl.keystore.location": str(stranger.issue("broker-2", "broker-2", hosts=("127.0.0.1",)).keystore_pem),
        "ssl.truststore.location": str(both)})
    cluster.brokers[2].tls = stranger.client_context(client)
    try:
        cluster.start_all()
        conf = ck_conf(cluster.brokers[1].bootstrap, authority, client)
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(TOPIC, 2, -1, replica_assignment=[[1, 2], [2, 1]])])[TOPIC].result(30)
        wait_for(lambda: "TLS handshake" in cluster.brokers[1].log_text(), 60,
                 "broker 1 to log the handshake it refused")
        assert "certificate" in cluster.brokers[1].log_text()
        assert cluster.leader_of(TOPIC, 0) == 1  # its preferred leader
        wait_for(lambda: cluster.state(TOPIC, 0).isr == [1], 60, "the replica that cannot connect to leave the ISR")
    finally:
        cluster.close()
