"""A cluster whose brokers serve a SASL listener, under the faults the
PLAINTEXT cluster is tested with, one after the other, with idempotent
producers logged in with SCRAM running throughout and a consumer reading
along; judged on the whole history (tests.cluster.history): nothing
acknowledged missing, nothing stored twice.  Every broker-to-broker
connection (a follower's fetches, a cut-off leader asking its peers) logs in
again after each fault.

The faults: a leader cut off from ZooKeeper alone; a broker cut off from its
peers only; a broker cut off from everything; a broker paused past its
session; ZooKeeper killed and restarted, with a producer that starts (and so
logs in) while it is down; a follower killed, its disk wiped, and started
again.

On SASL_SSL the same, over TLS: each of those connections also shakes hands
again, checking the peer's certificate against the address it dialled."""

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import SESSION_MS
from harness.sasl import ADMIN, add_scram_user, ck_conf, settings
from harness.tls import Authority, broker_settings
from harness.waiting import wait_for
from tests.cluster.history import ConsumerHistory, ProducerHistory, check, read_everything
from tests.cluster.lab_cluster import LabCluster
from tests.cluster.netlab import SUBNET

TOPIC, PARTITIONS, WAIT_S = "sasl-faults", 3, 60
WRITER = ("writer", "writer-secret")


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_logged_in_clients_and_brokers_lose_nothing_through_every_fault(netlab, tmp_path, listener):
    overrides, tls, context = settings(listener), {}, None
    if listener == "SASL_SSL":  # one certificate for every lab address: each broker's, checked by the others
        authority = Authority(tmp_path / "pki")
        certificate = authority.issue("brokers", "brokers", hosts=tuple(f"{SUBNET}.{n}" for n in range(1, 60)))
        overrides.update({k: v for k, v in broker_settings(authority, certificate, listener).items()
                          if k != "listeners"})
        tls, context = {"ssl.ca.location": str(authority.ca_file)}, authority.client_context()
    cluster = LabCluster(netlab, tmp_path, overrides=overrides, login=ADMIN, tls=context)
    cluster.start_all()
    try:
        scram = {**{k: v for k, v in ck_conf("", "SCRAM-SHA-512", *WRITER).items() if k != "bootstrap.servers"},
                 "security.protocol": listener, **tls}
        with cluster.inside_client():
            add_scram_user(cluster.bootstrap, WRITER[0], {"SCRAM-SHA-512": (WRITER[1].encode(), 4096)},
                           {"security.protocol": listener, **tls})
            admin = AdminClient({**ck_conf(cluster.bootstrap, "PLAIN", *ADMIN), "security.protocol": listener, **tls})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
            cluster.wait_in_sync(TOPIC, PARTITIONS)
            producers = ProducerHistory(cluster.bootstrap, TOPIC, producers=2, partitions=PARTITIONS, rate=100,
                                        config=scram)
            consumer = ConsumerHistory(cluster.bootstrap, TOPIC, PARTITIONS, config=scram)
        histories = [producers]

        def recovered(what: str) -> None:
            cluster.lab.heal()
            cluster.wait_in_sync(TOPIC, PARTITIONS)  # the followers logged in to fetch again
            wait_for(producers.progressed(200), WAIT_S, f"writes after {what}")

        def cut_off(broker_id: int, *others) -> None:
            for other in others:
                cluster.lab.cut(cluster.hosts[broker_id], other)

        try:
            wait_for(producers.progressed(300), WAIT_S, "writes to be acknowledged")

            leader = cluster.leader_of(TOPIC, 0)
            cut_off(leader, cluster.zk_host)
            wait_for(lambda: cluster.state(TOPIC, 0).leader not in (leader, -1), WAIT_S,
                     f"the controller to replace broker {leader}, cut off from ZooKeeper")
            wait_for(producers.progressed(200), WAIT_S, "writes to the new leaders")
            recovered("the leader cut off from ZooKeeper came back")

            follower = next(b for b in cluster.brokers if b != cluster.leader_of(TOPIC, 1))
            cut_off(follower, *(cluster.hosts[b] for b in cluster.brokers if b != follower))
            wait_for(lambda: follower not in cluster.state(TOPIC, 1).isr, WAIT_S,
                     f"broker {follower}, cut off from its peers, to leave the ISR")
            wait_for(producers.progressed(200), WAIT_S, "writes with two in the ISR")
            recovered("the broker cut off from its peers came back")

            isolated = cluster.leader_of(TOPIC, 2)
            cluster.lab.isolate(cluster.hosts[isolated])
            wait_for(lambda: cluster.state(TOPIC, 2).leader not in (isolated, -1), WAIT_S,
                     f"a new leader for broker {isolated}'s partition")
            recovered("the isolated broker came back")

            paused = cluster.leader_of(TOPIC, 1)
            cluster.pause(paused)
            stopped = time.monotonic()
            try:
                wait_for(lambda: cluster.state(TOPIC, 1).leader not in (paused, -1), WAIT_S,
                         f"a new leader while broker {paused} is paused")
                wait_for(lambda: time.monotonic() - stopped >= SESSION_MS / 1000 + 2, WAIT_S, "its session to lapse")
            finally:
                cluster.resume(paused)
            recovered("the paused broker resumed")

            cluster.zk_kill()
            wait_for(producers.progressed(200), WAIT_S, "writes while ZooKeeper is down")
            with cluster.inside_client():  # new connections, new logins: the credentials read before serve
                latecomer = ProducerHistory(cluster.bootstrap, TOPIC, producers=1, partitions=PARTITIONS, rate=100,
                                            config=scram, name="late")
            histories.append(latecomer)
            wait_for(latecomer.progressed(100), WAIT_S, "a producer started during the outage to log in and write")
            cluster.zk_start()
            recovered("ZooKeeper came back")

            wiped = next(b for b in cluster.brokers if b != cluster.leader_of(TOPIC, 0))
            cluster.kill(wiped)
            cluster.wipe(wiped)
            cluster.start(wiped)
            recovered(f"broker {wiped} came back with an empty disk")
        finally:
            for history in histories:
                history.stop()
            consumer.stop()
        final = read_everything(cluster.bootstrap, TOPIC, PARTITIONS, netns=cluster.client.netns, config=scram)
        report = check(histories, final, consumer)
        assert report.valid, report.summary() + "\n" + cluster.logs()
        assert report.acked >= 1500
        logs = "".join(b.log_text() for b in cluster.brokers.values())
        assert "SASL login refused" not in logs
        assert "its login uses the credential read last" in logs  # the latecomer's, during the outage
    finally:
        cluster.close()
