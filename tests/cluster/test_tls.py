"""Three brokers on SSL listeners that ask for client certificates (mutual
TLS): brokers follow each other over TLS, checking the host name each
connects to against the peer's certificate, and acks=all writes of clients
with certificates survive their partition leader's SIGKILL.  A broker whose
certificate the others do not trust cannot follow, and says why."""

import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import Cluster
from harness.tls import Authority, ck_conf
from harness.waiting import wait_for
from hpbroker.cluster import znodes
from tests.cluster.leader_kill import write_through_a_leader_kill

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

        victim = write_through_a_leader_kill(cluster, TOPIC, PARTITIONS, conf)
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
        # broker 1 first, as controller: the admin client below trusts only broker 1's authority and
        # sends CreateTopics to the controller, which it could not reach on broker 2
        cluster.start(1)
        wait_for(lambda: cluster.controller() == 1, 30, "broker 1 to be controller")
        cluster.start(2)
        conf = ck_conf(cluster.brokers[1].bootstrap, authority, client)
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(TOPIC, 2, -1, replica_assignment=[[1, 2], [2, 1]])])[TOPIC].result(30)
        refused = "hpbroker.workers.process: TLS handshake with 127.0.0.1:"  # a client's, not a dial of its own
        wait_for(lambda: refused in cluster.brokers[1].log_text(), 60, "broker 1 to log the handshake it refused")
        assert any(refused in line and "certificate" in line for line in cluster.brokers[1].log_text().splitlines())
        assert cluster.leader_of(TOPIC, 0) == 1  # its preferred leader
        wait_for(lambda: cluster.state(TOPIC, 0).isr == [1], 60, "the replica that cannot connect to leave the ISR")
    finally:
        cluster.close()
