"""Transactions while the broker's workers are killed under load: a
transactional producer keeps committing (numbered records, two partitions per
transaction) while the worker coordinating its transactional id, and then the
other worker, are SIGKILLed and restarted by the acceptor.  A read_committed
consumer then checks the whole history: every transaction whose commit was
acknowledged is there, whole; no transaction is there in part (torn); no
record is there twice; and an aborted transaction is not there at all."""

import threading

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for
from hpbroker.server.ownership import TRANSACTION_TOPIC, partition_owner, txn_partition
from tests.integration.clients import ck_read_committed, topic_name

RECORDS_PER_TXN = 6
STATE_PARTITIONS = 50  # transaction.state.log.num.partitions, the default


class Writer:
    """Commits numbered transactions until told to stop; keeps what each came to."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str):
        self.bootstrap, self.topic, self.transactional_id = bootstrap, topic, transactional_id
        self.committed: list[int] = []  # commit acknowledged
        self.aborted: list[int] = []  # aborted by us, acknowledged
        self.unknown: list[int] = []  # the outcome never came back (fatal error, timeout)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _producer(self) -> ck.Producer:
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                         "transaction.timeout.ms": 20000, "message.timeout.ms": 20000, "linger.ms": 2})
        p.init_transactions(60)
        return p

    def run(self) -> None:
        p, n = self._producer(), 0
        while not self.stop.is_set():
            try:
                p.begin_transaction()
                for i in range(RECORDS_PER_TXN):
                    p.produce(self.topic, b"%d:%d" % (n, i), partition=i % 2)
                if n % 7 == 3:
                    p.flush(30)
                    p.abort_transaction(30)
                    self.aborted.append(n)
                else:
                    p.commit_transaction(30)
                    self.committed.append(n)
            except ck.KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    try:
                        p.abort_transaction(30)
                        self.aborted.append(n)
                    except ck.KafkaException:
                        self.unknown.append(n)
                        p = self._producer()
                elif error.retriable() and not error.fatal():
                    self.unknown.append(n)  # a commit that timed out may yet have happened: checked whole
                    p = self._producer()  # a new instance fences the old and resolves it
                else:
                    self.unknown.append(n)
                    p = self._producer()
            n += 1
        p.flush(10)


def test_transactions_survive_worker_kills(broker_factory):
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}, num_workers=2)
    topic, tid = topic_name("txn-kill"), "txn-kill-writer"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    coordinator = partition_owner(TRANSACTION_TOPIC, txn_partition(tid, STATE_PARTITIONS), 2)
    writer = Writer(broker.bootstrap, topic, tid)
    writer.thread.start()
    try:
        wait_for(lambda: len(writer.committed) >= 10, 60, "ten transactions committed")
        broker.kill_worker(coordinator)
        wait_for(lambda: len(writer.committed) >= 25, 90, "commits after the coordinator's worker restarted")
        broker.kill_worker(1 - coordinator)
        wait_for(lambda: len(writer.committed) >= 40, 90, "commits after the other worker restarted")
    finally:
        writer.stop.set()
        writer.thread.join(120)
    assert not writer.thread.is_alive()
    values = ck_read_committed(broker.bootstrap, topic, range(2), len(writer.committed) * RECORDS_PER_TXN, 90)
    seen: dict[int, list[int]] = {}
    for value in values:
        txn, record = (int(x) for x in value.split(b":"))
        seen.setdefault(txn, []).append(record)
    duplicates = {t: r for t, r in seen.items() if len(r) != len(set(r))}
    torn = {t: sorted(r) for t, r in seen.items() if set(r) != set(range(RECORDS_PER_TXN))}
    lost = [t for t in writer.committed if t not in seen]
    aborted_read = [t for t in writer.aborted if t in seen]
    assert (duplicates, torn, lost, aborted_read) == ({}, {}, [], [])
    assert set(seen) <= set(writer.committed) | set(writer.unknown)
