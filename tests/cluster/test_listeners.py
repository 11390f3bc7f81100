"""Brokers with two listeners each: INTERNAL (PLAINTEXT), the one they
replicate over (``inter.broker.listener.name``), and EXTERNAL
(SASL_PLAINTEXT) for clients.  Each broker registers both; a client on
EXTERNAL is told every broker's EXTERNAL address, logs in, and its acks=all
writes survive their leader's SIGKILL.  A broker without the client's
listener is left out of that client's answers, its partitions
LISTENER_NOT_FOUND, as Kafka answers."""

import json

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from harness.broker import free_port
from harness.cluster import Cluster
from harness.waiting import wait_for
from hpbroker.cluster import znodes
from tests.cluster.leader_kill import write_through_a_leader_kill

TOPIC, PARTITIONS = "orders", 3
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_app="app-secret";'
SETTINGS = {"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL", "min.insync.replicas": "2",
            "listener.name.external.plain.sasl.jaas.config": JAAS}
LISTENER_NOT_FOUND = 72


def two_listeners(cluster: Cluster, internal_only=()) -> dict[int, int]:
    """Each broker's EXTERNAL port (the harness gives INTERNAL, the first, its own)."""
    ports = {}
    for broker_id, broker in cluster.brokers.items():
        listeners = "INTERNAL://127.0.0.1:0"
        if broker_id not in internal_only:
            ports[broker_id] = free_port()
            listeners += f",EXTERNAL://127.0.0.1:{ports[broker_id]}"
        broker.overrides["listeners"] = listeners
    return ports


def external(ports: dict[int, int]) -> dict:
    return {"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports.values()),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "app",
            "sasl.password": "app-secret"}


def test_clients_on_the_external_listener_survive_a_leader_kill(zookeeper, chroot, tmp_path):
    cluster = Cluster(chroot, tmp_path, 3, overrides=SETTINGS)
    ports = two_listeners(cluster)
    try:
        cluster.start_all()
        registration = json.loads(cluster.zk.get(znodes.broker_path(1))[0])
        assert registration["endpoints"] == [f"INTERNAL://127.0.0.1:{cluster.brokers[1].port}",
                                             f"EXTERNAL://127.0.0.1:{ports[1]}"]
        assert registration["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT",
                                                                  "EXTERNAL": "SASL_PLAINTEXT"}
        admin = AdminClient(external(ports))
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        told = admin.list_topics(timeout=30).brokers
        assert {b.id: (b.host, b.port) for b in told.values()} == {i: ("127.0.0.1", p) for i, p in ports.items()}
        inside = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=30).brokers
        assert {b.id: b.port for b in inside.values()} == {i: b.port for i, b in cluster.brokers.items()}
        cluster.wait_in_sync(TOPIC, PARTITIONS)  # the followers fetch over INTERNAL

        victim = write_through_a_leader_kill(cluster, TOPIC, PARTITIONS, external(ports))
        cluster.start(victim)  # back, it follows the new leaders over INTERNAL and catches up
        cluster.wait_in_sync(TOPIC, PARTITIONS)
    finally:
        cluster.close()


def test_a_broker_without_the_clients_listener_is_left_out_of_their_answers(zookeeper, chroot, tmp_path):
    cluster = Cluster(chroot, tmp_path, 2, overrides=SETTINGS)
    ports = two_listeners(cluster, internal_only=(2,))
    try:
        cluster.start_all()
        inside = AdminClient({"bootstrap.servers": cluster.bootstrap})
        inside.create_topics([NewTopic(TOPIC, 2, -1, replica_assignment=[[1, 2], [2, 1]])])[TOPIC].result(30)
        wait_for(lambda: (cluster.leader_of(TOPIC, 0), cluster.leader_of(TOPIC, 1)) == (1, 2), 60,
                 "each broker to lead its preferred partition")
        outside = AdminClient(external(ports))

        def told():
            found = outside.list_topics(TOPIC, timeout=30)
            partitions = found.topics[TOPIC].partitions
            errors = {p: (m.error.code() if m.error is not None else 0, m.leader) for p, m in partitions.items()}
            return {b.id: b.port for b in found.brokers.values()}, errors
        wait_for(lambda: told() == ({1: ports[1]}, {0: (0, 1), 1: (LISTENER_NOT_FOUND, -1)}), 30,
                 "broker 2 to be left out of EXTERNAL's answers")
        producer = ck.Producer({**external(ports), "acks": "all"})
        producer.produce(TOPIC, b"reachable", partition=0)
        assert producer.flush(30) == 0
    finally:
        cluster.close()
