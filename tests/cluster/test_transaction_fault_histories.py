"""Transactions through the network faults of cluster mode, judged on the whole
history (``txn_history.py``): a transactional producer commits small
transactions over two partitions (replication factor 3, min.insync.replicas
2) while

* the broker coordinating its transactional id is cut off from every other
  host (ZooKeeper included) until the controller has moved its leaderships,
  then let back;
* ZooKeeper is killed and restarted after three session timeouts;
* a data partition's leader is paused past its session (another broker
  leads it), then resumed;
* another leader is cut off from its peers only, so its followers leave the
  ISR and acks=all is refused below min.insync.replicas, then let back;
* a follower of the transaction log is restarted on a wiped disk, and once
  it has caught up the coordinator's broker is SIGKILLed (and started again);

and a read_committed read of the whole topic must then hold every committed
transaction whole and once, nothing of an aborted one, and every transaction
of unknown outcome whole or not at all.
"""

import time

from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import SESSION_MS
from harness.waiting import wait_for
from hpbroker.server.ownership import TRANSACTION_TOPIC, txn_partition
from tests.cluster.history import read_everything
from tests.cluster.lab_cluster import LabCluster
from tests.cluster.txn_history import TransactionalHistory, check_transactions

WAIT_S = 90
TRANSACTION_PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default


def test_transactions_through_cuts_a_zookeeper_restart_a_pause_a_wiped_follower_and_a_kill(netlab, tmp_path):
    cluster = LabCluster(netlab, tmp_path, overrides={"replica.lag.time.max.ms": "10000"})
    cluster.start_all()
    topic, partitions, txn_id = "txn-faults", 2, "txn-history-1"
    state_partition = txn_partition(txn_id, TRANSACTION_PARTITIONS)
    history = None
    try:
        with cluster.inside_client():
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)
            cluster.wait_in_sync(topic, partitions)
            history = TransactionalHistory(cluster.bootstrap, topic, partitions, txn_id)
        try:
            wait_for(history.progressed(20), WAIT_S, "20 committed transactions")
            cluster.wait_in_sync(TRANSACTION_TOPIC, TRANSACTION_PARTITIONS)

            # the coordinator's broker, cut off from everyone: its session expires and
            # another broker leads the transaction log's partition, and coordinates
            coordinator = cluster.leader_of(TRANSACTION_TOPIC, state_partition)
            cluster.lab.isolate(cluster.hosts[coordinator])
            wait_for(lambda: cluster.state(TRANSACTION_TOPIC, state_partition).leader not in (coordinator, -1),
                     WAIT_S, f"a coordinator other than broker {coordinator}")
            wait_for(history.progressed(10), WAIT_S, "commits through the new coordinator")
            cluster.lab.heal()
            cluster.wait_in_sync(TRANSACTION_TOPIC, TRANSACTION_PARTITIONS)
            cluster.wait_in_sync(topic, partitions)
            wait_for(history.progressed(10), WAIT_S, "commits after the heal")

            # ZooKeeper away for three session timeouts: leaders and coordinators go on
            cluster.zk_kill()
            down = time.monotonic()
            wait_for(lambda: time.monotonic() - down >= 3 * SESSION_MS / 1000, 3 * SESSION_MS / 1000 + 5,
                     "three session timeouts of outage")
            cluster.zk_start()
            wait_for(history.progressed(10), WAIT_S, "commits after ZooKeeper is back")

            # a data partition's leader paused past its session: replaced, then back as a follower
            paused = cluster.leader_of(topic, 0)
            cluster.pause(paused)
            try:
                wait_for(lambda: cluster.state(topic, 0).leader not in (paused, -1), WAIT_S,
                         f"a leader of {topic}-0 other than the paused broker {paused}")
                wait_for(history.progressed(10), WAIT_S, "commits through the new leader")
            finally:
                cluster.resume(paused)
            cluster.wait_in_sync(topic, partitions)
            wait_for(history.progressed(10), WAIT_S, "commits with the paused broker back")

            # a leader cut off from its peers only: its followers leave the ISR, acks=all is refused
            # below min.insync.replicas (transactions abort) until the cut heals and they catch up
            alone = cluster.leader_of(topic, 1)
            cluster.lab.split([cluster.hosts[alone]], [h for i, h in cluster.hosts.items() if i != alone])
            wait_for(lambda: cluster.state(topic, 1).isr == [alone], WAIT_S, f"{topic}-1's ISR down to its leader")
            cluster.lab.heal()
            cluster.wait_in_sync(topic, partitions)
            wait_for(history.progressed(10), WAIT_S, "commits after the cut healed")

            # a follower of the transaction log restarted on a wiped disk, then the coordinator
            # killed: whoever coordinates next, from what it copied, must know every transaction
            coordinator = cluster.leader_of(TRANSACTION_TOPIC, state_partition)
            wiped = next(i for i in cluster.brokers if i != coordinator)
            cluster.kill(wiped)
            cluster.wipe(wiped)
            cluster.start(wiped)
            cluster.wait_in_sync(TRANSACTION_TOPIC, TRANSACTION_PARTITIONS)
            cluster.wait_in_sync(topic, partitions)
            wait_for(history.progressed(10), WAIT_S, "commits with the wiped follower back")
            cluster.kill(coordinator)
            wait_for(lambda: cluster.state(TRANSACTION_TOPIC, state_partition).leader not in (coordinator, -1),
                     WAIT_S, f"a coordinator other than the killed broker {coordinator}")
            wait_for(history.progressed(10), WAIT_S, "commits through the next coordinator")
            cluster.start(coordinator)
            cluster.wait_in_sync(topic, partitions)
            wait_for(history.progressed(10), WAIT_S, "commits with every broker back")
        finally:
            history.stop()
        assert not history.crashed, history.crashed
        final = read_everything(cluster.bootstrap, topic, partitions, timeout=WAIT_S, netns=cluster.client.netns,
                                config={"isolation.level": "read_committed"})
        report = check_transactions(history.txns, final)
        assert report.valid, report.summary() + "\n" + cluster.logs()
        assert report.committed >= 50, report.summary()
    finally:
        if history is not None:
            history.stop()
        cluster.close()
