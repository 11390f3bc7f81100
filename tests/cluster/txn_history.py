"""A transactional producer's history, and its checker (the transactional
counterpart of ``history.py``).

``TransactionalHistory`` runs one confluent-kafka transactional producer in a
thread of its own, committing transactions of ``size`` records spread over
the topic's partitions (values ``b"<name>-<txn>-<i>"``) until ``stop()``.
Each transaction's outcome is what the client was told:

* committed: ``commit_transaction`` returned;
* aborted: it failed abortably and ``abort_transaction`` returned;
* unknown: neither returned (a fatal error such as a fence, or time ran
  out); the next producer's ``init_transactions`` then finishes it one way
  or the other, so it is whole or absent.

``check_transactions(txns, final_read)`` reads a read_committed
``read_everything`` of the topic and finds:

* lost: a committed transaction with a record missing;
* torn: an unknown transaction with some records present and some missing;
* aborted_read: a record of an aborted transaction;
* duplicated: a value at more than one offset;
* stranger: a value no transaction wrote.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import confluent_kafka as ck

from harness.netns import entered
from tests.cluster.history import grown

_ATTEMPTS = 20  # commits retried on a retriable error, as librdkafka allows


@dataclass
class Txn:
    tag: str
    values: list[bytes]
    outcome: str = "open"  # committed, aborted, unknown
    error: str | None = None


class TransactionalHistory:
    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str, size: int = 4,
                 netns: str | None = None, name: str = "t", config: dict | None = None):
        self.topic, self.partitions, self.size = topic, partitions, size
        self.netns, self.name = netns, name
        self.config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                       "transaction.timeout.ms": 10000, "message.timeout.ms": 10000, "linger.ms": 5,
                       "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
                       **(config or {})}
        self.txns: list[Txn] = []
        self.crashed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"txn-history-{name}")
        self._thread.start()

    @property
    def committed(self) -> int:
        return sum(1 for t in list(self.txns) if t.outcome == "committed")

    def progressed(self, count: int):
        """A condition (for wait_for): ``count`` more committed transactions than when asked."""
        return grown(lambda: self.committed, count, self.crashed, "the transactional producer thread")

    def stop(self, timeout: float = 90.0) -> TransactionalHistory:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.crashed.append("did not stop")
        return self

    def _run(self) -> None:
        try:
            with entered(self.netns):
                self._transact()
        except BaseException as exc:  # noqa: BLE001 - reported through progressed() and the test
            self.crashed.append(repr(exc))

    def _producer(self) -> ck.Producer:
        while True:
            producer = ck.Producer(self.config)
            try:
                producer.init_transactions(30)
                return producer
            except ck.KafkaException:  # the coordinator away for longer: a new instance tries again
                if self._stop.is_set():
                    raise
                time.sleep(0.2)

    def _transact(self) -> None:
        producer = self._producer()
        number = 0
        while not self._stop.is_set():
            tag = f"{self.name}-{number:06d}"
            txn = Txn(tag, [f"{tag}-{i}".encode() for i in range(self.size)])
            self.txns.append(txn)
            number += 1
            try:
                producer.begin_transaction()
                for i, value in enumerate(txn.values):
                    producer.produce(self.topic, value, partition=i % self.partitions)
                self._commit(producer, txn)
            except ck.KafkaException as exc:
                error = exc.args[0]
                txn.error = str(error)
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        txn.outcome = "aborted"
                        continue
                    except ck.KafkaException as again:
                        txn.error = f"{txn.error}; abort: {again.args[0]}"
                txn.outcome = "unknown"
                producer = self._producer()  # fences whatever the last one left, then carries on

    def _commit(self, producer: ck.Producer, txn: Txn) -> None:
        for attempt in range(_ATTEMPTS):
            try:
                producer.commit_transaction(30)
                txn.outcome = "committed"
                return
            except ck.KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or error.txn_requires_abort() or attempt == _ATTEMPTS - 1:
                    raise
                time.sleep(0.2)


@dataclass
class TxnReport:
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    lost: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    aborted_read: list[str] = field(default_factory=list)
    duplicated: list[bytes] = field(default_factory=list)
    stranger: list[bytes] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not (self.lost or self.torn or self.aborted_read or self.duplicated or self.stranger)

    def summary(self) -> str:
        return (f"{self.committed} committed, {self.aborted} aborted, {self.unknown} unknown; "
                f"lost {self.lost[:5]}, torn {self.torn[:5]}, aborted but read {self.aborted_read[:5]}, "
                f"duplicated {self.duplicated[:5]}, strangers {self.stranger[:5]}")


def check_transactions(txns: list[Txn], final_read: dict[int, list[tuple[int, bytes]]]) -> TxnReport:
    """Judge every transaction (of one history or several) against a
    read_committed read of the whole topic."""
    found = Counter(value for entries in final_read.values() for _offset, value in entries)
    report = TxnReport()
    known: set[bytes] = set()
    for txn in txns:
        known.update(txn.values)
        present = [found[v] > 0 for v in txn.values]
        if txn.outcome == "committed":
            report.committed += 1
            if not all(present):
                report.lost.append(txn.tag)
        elif txn.outcome == "aborted":
            report.aborted += 1
            if any(present):
                report.aborted_read.append(txn.tag)
        else:  # unknown, or open when the history stopped: whole or absent
            report.unknown += 1
            if any(present) and not all(present):
                report.torn.append(txn.tag)
    report.duplicated = sorted(v for v, n in found.items() if n > 1)
    report.stranger = sorted(v for v in found if v not in known)
    return report
