"""ACLs in a cluster: kept in ZooKeeper in Kafka's AclAuthorizer layout, so a
change made through one broker holds on every broker, and an ACL written
into ZooKeeper as Kafka's own tools write it is obeyed too.  The brokers
replicate over INTERNAL (PLAINTEXT, whose User:ANONYMOUS is a super user,
as Kafka's operators make the brokers' principal); a client logs in on
EXTERNAL and may do what its ACLs say, its acks=all writes surviving their
leader's SIGKILL and a restart of ZooKeeper."""

import itertools
import json

import confluent_kafka as ck
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from harness.acls import acl_filter
from harness.broker import free_port
from harness.cluster import Cluster
from harness.waiting import wait_for
from tests.cluster.leader_kill import write_through_a_leader_kill

TOPIC, PARTITIONS = "orders", 3
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_app="app-secret";'
SETTINGS = {"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL", "min.insync.replicas": "2",
            "listener.name.external.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS"}



_probes = itertools.count()


def external(port: int) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "app-secret"}


def app_may_write(port: int, topic: str) -> bool:
    """One record written by app through that broker (each a value of its own:
    the leader-kill check counts duplicates)."""
    producer = ck.Producer({**external(port), "message.timeout.ms": 5000})
    errors: list = []
    producer.produce(topic, b"probe-%d" % next(_probes), on_delivery=lambda err, _msg: errors.append(err is None))
    producer.flush(10)
    return errors == [True]


def test_acls_live_in_zookeeper_and_hold_on_every_broker(zookeeper, chroot, tmp_path):
    cluster = Cluster(chroot, tmp_path, 3, overrides=SETTINGS)
    ports = {}
    for broker_id, broker in cluster.brokers.items():
        ports[broker_id] = free_port()
        broker.overrides["listeners"] = f"INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:{ports[broker_id]}"
    try:
        cluster.start_all()
        inside = AdminClient({"bootstrap.servers": cluster.bootstrap})  # User:ANONYMOUS, a super user
        inside.create_topics([NewTopic(TOPIC, PARTITIONS, 3), NewTopic("audit", 1, 3)])[TOPIC].result(30)
        cluster.wait_in_sync(TOPIC, PARTITIONS)  # the followers' fetches are CLUSTER_ACTION: allowed
        assert not app_may_write(ports[2], TOPIC)

        # made through broker 1 (from outside: app may not make ACLs; the brokers' listener may)
        through_one = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.brokers[1].port}"})
        made = through_one.create_acls([
            AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:app", "*", kind,
                       AclPermissionType.ALLOW) for kind in (AclOperation.WRITE, AclOperation.READ)] + [
            AclBinding(ResourceType.GROUP, "audit", ResourcePatternType.PREFIXED, "User:app", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)])
        for future in made.values():
            assert future.result(30) is None
        stored = json.loads(cluster.zk.get(f"/kafka-acl/Topic/{TOPIC}")[0])
        assert stored["version"] == 1 and sorted(stored["acls"], key=lambda a: a["operation"]) == [
            {"principal": "User:app", "permissionType": "Allow", "operation": op, "host": "*"}
            for op in ("Read", "Write")]
        assert json.loads(cluster.zk.get("/kafka-acl-extended/prefixed/Group/audit")[0])["acls"][0]["operation"] \
            == "Read"
        notes = [cluster.zk.get(f"/kafka-acl-changes/{n}")[0] for n in cluster.zk.get_children("/kafka-acl-changes")]
        assert f"TOPIC:{TOPIC}".encode() in notes

        for broker_id, port in ports.items():  # every broker obeys it
            wait_for(lambda port=port: app_may_write(port, TOPIC), 30, f"broker {broker_id} to let app write")
        everything = acl_filter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                AclPermissionType.ANY)
        through_three = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.brokers[3].port}"})
        assert len(through_three.describe_acls(everything).result(30)) == 3

        victim = write_through_a_leader_kill(cluster, TOPIC, PARTITIONS, {
            **external(ports[1]), "bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports.values())})
        cluster.start(victim)
        cluster.wait_in_sync(TOPIC, PARTITIONS)

        zookeeper.restart()  # the ACLs each broker holds are obeyed through it
        for broker_id, port in ports.items():
            wait_for(lambda port=port: app_may_write(port, TOPIC), 60, f"broker {broker_id} to let app write")

        # an ACL written straight into ZooKeeper, as Kafka's tools write it, is obeyed
        cluster.zk.create("/kafka-acl/Topic/audit", json.dumps({"version": 1, "acls": [
            {"principal": "User:app", "permissionType": "Allow", "operation": "Write", "host": "*"}]}).encode())
        wait_for(lambda: app_may_write(ports[victim], "audit"), 30, "the hand-written ACL to let app write")

        # removed through broker 3: its znode goes, and broker 1 refuses app again
        gone = acl_filter(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:app", None,
                          AclOperation.WRITE, AclPermissionType.ANY)
        assert len(through_three.delete_acls([gone])[gone].result(30)) == 1
        assert [a["operation"] for a in json.loads(cluster.zk.get(f"/kafka-acl/Topic/{TOPIC}")[0])["acls"]] \
            == ["Read"]
        wait_for(lambda: not app_may_write(ports[1], TOPIC), 30, "broker 1 to refuse app again")
        producer = ck.Producer({**external(ports[1]), "message.timeout.ms": 5000})
        errors: list = []
        producer.produce(TOPIC, b"late", on_delivery=lambda err, _msg: errors.append(err.code() if err else None))
        producer.flush(10)
        assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        cluster.close()
