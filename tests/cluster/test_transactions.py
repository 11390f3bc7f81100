"""Transactions in cluster mode: the coordinator of a transactional id is the
leader of its ``__transaction_state`` partition, the markers reach partitions
led by other brokers (WriteTxnMarkers), a produce is verified with a
coordinator on another broker (KIP-890), and when the coordinator's broker is
killed mid-transaction the new leader of its state partition finishes what
was decided and aborts what was left open."""


import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import Cluster
from harness.waiting import wait_for
from hpbroker.server.ownership import TRANSACTION_TOPIC, txn_partition
from tests.integration.clients import ck_read_committed

TOPIC, PARTITIONS = "payments", 3
STATE_PARTITIONS = 3
OVERRIDES = {"min.insync.replicas": "2", "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture
def txn_cluster(zookeeper, chroot, tmp_path):
    found = Cluster(chroot, tmp_path, 3, overrides=OVERRIDES)
    found.start_all()
    admin = AdminClient({"bootstrap.servers": found.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    found.wait_in_sync(TOPIC, PARTITIONS)
    yield found
    found.close()


def producer(cluster: Cluster, transactional_id: str, **conf) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 10000, **conf})
    p.init_transactions(60)
    return p


def read_committed(cluster: Cluster, expected: int, timeout: float = 60) -> list[bytes]:
    return ck_read_committed(cluster.bootstrap, TOPIC, range(PARTITIONS), expected, timeout)


def state_leader(cluster: Cluster, transactional_id: str) -> int:
    return cluster.leader_of(TRANSACTION_TOPIC, txn_partition(transactional_id, STATE_PARTITIONS))


def test_commit_and_abort_reach_every_partitions_leader(txn_cluster):
    leaders = {txn_cluster.leader_of(TOPIC, p) for p in range(PARTITIONS)}
    assert len(leaders) > 1  # the markers must cross to other brokers
    p = producer(txn_cluster, "payments-writer")
    p.begin_transaction()
    for n in range(30):
        p.produce(TOPIC, b"committed-%d" % n, partition=n % PARTITIONS)
    p.commit_transaction(30)
    p.begin_transaction()
    for n in range(30):
        p.produce(TOPIC, b"aborted-%d" % n, partition=n % PARTITIONS)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for n in range(6):
        p.produce(TOPIC, b"after-%d" % n, partition=n % PARTITIONS)
    p.commit_transaction(30)
    got = read_committed(txn_cluster, 36)
    assert sorted(got) == sorted([b"committed-%d" % n for n in range(30)] + [b"after-%d" % n for n in range(6)])


def test_a_killed_coordinator_is_succeeded_and_nothing_is_torn(txn_cluster):
    """The coordinator's broker is SIGKILLed with one transaction committed
    and the next one open: the committed one stays whole, the open one is
    aborted by the new coordinator (its producer's timeout), and a new
    instance of the producer carries on."""
    tid = "payments-failover"
    p = producer(txn_cluster, tid)
    p.begin_transaction()
    for n in range(12):
        p.produce(TOPIC, b"first-%d" % n, partition=n % PARTITIONS)
    p.commit_transaction(30)
    p.begin_transaction()
    for n in range(12):
        p.produce(TOPIC, b"open-%d" % n, partition=n % PARTITIONS)
    assert p.flush(30) == 0
    coordinator = state_leader(txn_cluster, tid)
    txn_cluster.kill(coordinator)
    wait_for(lambda: state_leader(txn_cluster, tid) not in (coordinator, -1), 60, "a new transaction coordinator")
    # the open transaction times out on its new coordinator, which aborts it
    del p
    survivor = producer(txn_cluster, tid)
    survivor.begin_transaction()
    for n in range(6):
        survivor.produce(TOPIC, b"second-%d" % n, partition=n % PARTITIONS)
    survivor.commit_transaction(60)
    got = read_committed(txn_cluster, 18)
    assert sorted(got) == sorted([b"first-%d" % n for n in range(12)] + [b"second-%d" % n for n in range(6)])
    txn_cluster.start(coordinator)


def test_a_commit_decided_before_its_coordinator_died_is_completed_by_the_next(txn_cluster):
    """The markers cannot reach one partition's leader (paused) when the
    producer commits: EndTxn is answered once PrepareCommit is written and the
    marker wait runs out; then the coordinator's broker is SIGKILLed.  The new
    leader of the state partition loads PrepareCommit and writes the markers
    itself, to whoever leads each partition by then: the whole transaction
    becomes visible, and nothing else."""
    producer(txn_cluster, "warm-up")  # its FindCoordinator creates __transaction_state
    txn_cluster.wait_in_sync(TRANSACTION_TOPIC, STATE_PARTITIONS)
    tid = next(t for t in (f"payments-decided-{i}" for i in range(100))
               if len({state_leader(txn_cluster, t)} | {txn_cluster.leader_of(TOPIC, p)
                                                        for p in range(PARTITIONS)}) == 3)
    coordinator = state_leader(txn_cluster, tid)
    stalled_partition = next(p for p in range(PARTITIONS) if txn_cluster.leader_of(TOPIC, p) != coordinator)
    stalled = txn_cluster.leader_of(TOPIC, stalled_partition)
    p = producer(txn_cluster, tid)
    p.begin_transaction()
    for n in range(12):
        p.produce(TOPIC, b"decided-%d" % n, partition=n % PARTITIONS)
    assert p.flush(30) == 0
    txn_cluster.pause(stalled)
    try:
        p.commit_transaction(60)  # answered: the decision is written, the markers are on their way
        txn_cluster.kill(coordinator)
    finally:
        txn_cluster.resume(stalled)
    wait_for(lambda: state_leader(txn_cluster, tid) not in (coordinator, -1), 60, "a new transaction coordinator")
    got = read_committed(txn_cluster, 12, timeout=90)
    assert sorted(got) == sorted(b"decided-%d" % n for n in range(12))
    txn_cluster.start(coordinator)


def test_a_topic_deleted_mid_transaction_does_not_hold_it_open(txn_cluster):
    """A transaction writes to two topics and one is deleted before the
    commit.  A leader's "unknown topic" answer to a marker is retried (it may
    only be behind on a new topic); what ends the retries is the
    coordinator's own image no longer holding the topic.  So the commit
    completes on the topic that stays, and the next transaction runs."""
    doomed = "refunds"
    admin = AdminClient({"bootstrap.servers": txn_cluster.bootstrap})
    admin.create_topics([NewTopic(doomed, PARTITIONS, 3)])[doomed].result(30)
    txn_cluster.wait_in_sync(doomed, PARTITIONS)
    p = producer(txn_cluster, "payments-and-refunds")
    p.begin_transaction()
    for n in range(12):
        p.produce(TOPIC, b"kept-%d" % n, partition=n % PARTITIONS)
        p.produce(doomed, b"dropped-%d" % n, partition=n % PARTITIONS)
    assert p.flush(30) == 0
    admin.delete_topics([doomed], operation_timeout=30)[doomed].result(40)
    p.commit_transaction(60)
    p.begin_transaction()  # its partitions are refused (concurrent transactions) until the last one completed
    for n in range(3):
        p.produce(TOPIC, b"next-%d" % n, partition=n)
    p.commit_transaction(60)
    got = read_committed(txn_cluster, 15)
    assert sorted(got) == sorted([b"kept-%d" % n for n in range(12)] + [b"next-%d" % n for n in range(3)])
