"""Jepsen-style histories of real Kafka clients, and a checker for them.

A test runs clients through its faults and records what each operation *did*,
not only whether the happy path held:

* ``ProducerHistory``: N idempotent acks=all confluent-kafka producers, each
  in a thread of its own, sending unique values (``b"p1-000042"``: producer
  and counter).  Every send is recorded with its time; on delivery it becomes
  acknowledged (with the partition and offset the broker gave it) or failed
  (with the error).  What has no outcome when the history stops is
  indeterminate: it may or may not have been written.
* ``ConsumerHistory``: a consumer assigned every partition from the start,
  reading along and recording every (partition, offset, value) it is given.
* ``read_everything``: after the run, each partition read whole, from its
  start up to its high watermark.

``check(producers, final_read, consumer_reads)`` then looks for the anomalies
(Jepsen's names in brackets where they differ):

* lost: an acknowledged value absent from the final read;
* duplicated: a value seen at two different offsets (any value: failed and
  indeterminate sends count too, idempotence must keep them single);
* wrong_offset: an acknowledged (partition, offset) that does not hold the
  value it acknowledged;
* inconsistent: one (partition, offset) read with two different values across
  the live reads and the final read (a divergent log);
* reordered: one producer's acknowledged values in one partition stored out of
  their send order;
* vanished: a value a live consumer read (so it was committed: consumers are
  only given records below the high watermark) missing from the final read
  [lost, unseen].

Times are ``time.monotonic()`` seconds, so a test can take ``t0 =
time.monotonic()`` before a fault and ask ``acked_between(t0, t1)``.

Clients must run where the brokers are reachable: inside a NetLab client host
either because the history is built inside ``lab.inside(host)`` (its threads
inherit the namespace) or by passing ``netns=host.netns``.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, cast

import confluent_kafka as ck

from harness.netns import entered

_PURGED = (ck.KafkaError._PURGE_QUEUE, ck.KafkaError._PURGE_INFLIGHT)


def value_of(producer: str, seq: int) -> bytes:
    """The value producer ``producer`` sends as its ``seq``-th record."""
    return b"%s-%06d" % (producer.encode(), seq)


def _partition_list(partitions) -> list[int]:
    return list(range(partitions)) if isinstance(partitions, int) else sorted(partitions)


# --- what happened ------------------------------------------------------------------
@dataclass(eq=False)
class Send:
    """One produce call and its outcome."""
    producer: str
    seq: int  # the producer's counter: send order
    value: bytes
    sent_at: float
    partition: int | None = None  # asked for (None: by key), then the acknowledged one
    offset: int | None = None
    done_at: float | None = None  # when the outcome arrived
    error: str | None = None
    key: bytes | None = None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.done_at is not None and self.offset is not None:
            return "acked"
        return "indeterminate"

    def __repr__(self) -> str:
        where = f" at {self.partition}:{self.offset}" if self.offset is not None else ""
        why = f" ({self.error})" if self.error else ""
        return f"<{self.value.decode(errors='replace')} {self.status}{where}{why}>"


def acked(producer: str, seq: int, partition: int, offset: int, at: float = 0.0) -> Send:
    """A hand-made acknowledged send (for tests of the checker)."""
    return Send(producer, seq, value_of(producer, seq), at, partition, offset, at)


def failed(producer: str, seq: int, error: str = "failed", at: float = 0.0) -> Send:
    return Send(producer, seq, value_of(producer, seq), at, done_at=at, error=error)


def indeterminate(producer: str, seq: int, at: float = 0.0) -> Send:
    return Send(producer, seq, value_of(producer, seq), at)


class Read(NamedTuple):
    partition: int
    offset: int
    value: bytes
    at: float = 0.0


# --- producers ----------------------------------------------------------------------
def grown(current: Callable[[], int], count: int, crashed: list[str], who: str) -> Callable[[], bool]:
    """A condition (for wait_for): ``current()`` at least ``count`` above what it
    is now; raises once ``crashed`` names a failure (``who`` died)."""
    target = current() + count

    def reached() -> bool:
        if crashed:
            raise AssertionError(f"{who} died: {crashed[0]}")
        return current() >= target
    return reached


class _Producing:
    def __init__(self, name: str):
        self.name = name
        self.sends: list[Send] = []
        self.acked = 0
        self.thread: threading.Thread | None = None


class ProducerHistory:
    """``producers`` idempotent acks=all producers sending until ``stop()``.

    ``partitions``: None to spread by key (``b"k<n mod 17>"``), or a count (or
    list) of partitions to send to round-robin.  ``rate``: sends per second per
    producer (None: as fast as the client takes them).  ``config`` is laid over
    the producer settings; ``netns`` runs the threads in that namespace."""

    def __init__(self, bootstrap: str, topic: str, producers: int = 2, partitions=None, rate: float | None = 200.0,
                 config: dict | None = None, netns: str | None = None, name: str = "p",
                 flush_timeout: float = 30.0):
        self.topic = topic
        # One request in flight per broker: with more, a request failing retriably (say
        # NOT_ENOUGH_REPLICAS while the ISR shrinks) makes the broker answer the ones
        # pipelined behind it OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka does, and librdkafka
        # (2.16 included) then bumps its epoch and re-sends possibly written messages
        # under new sequences: duplicates that are the client's doing, not the broker's
        # (confluentinc/librdkafka#4953).  Pass a larger value in ``config`` to test that path.
        self.config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                       "max.in.flight.requests.per.connection": 1,
                       "linger.ms": 5, "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000,
                       "reconnect.backoff.max.ms": 500, **(config or {})}
        self.partitions = None if partitions is None else _partition_list(partitions)
        self.rate = rate
        self.netns = netns
        self.flush_timeout = flush_timeout
        self.crashed: list[str] = []
        self._stop = threading.Event()
        self._producing = [_Producing(f"{name}{i}") for i in range(1, producers + 1)]
        for producing in self._producing:
            producing.thread = threading.Thread(target=self._run, args=(producing,), daemon=True,
                                                name=f"history-{producing.name}")
            producing.thread.start()

    # --- what has happened so far --------------------------------------------------
    @property
    def sends(self) -> list[Send]:
        """Every send so far, producer by producer, each in send order."""
        return [s for p in self._producing for s in list(p.sends)]

    @property
    def acked(self) -> int:
        return sum(p.acked for p in self._producing)

    def acked_between(self, t0: float, t1: float | None = None) -> list[Send]:
        """The sends acknowledged at monotonic times t0..t1 (t1: now)."""
        t1 = time.monotonic() if t1 is None else t1
        return [s for s in self.sends if s.status == "acked" and s.done_at is not None and t0 <= s.done_at <= t1]

    def progressed(self, count: int):
        """A condition (for wait_for): ``count`` more acknowledgements than when asked."""
        return grown(lambda: self.acked, count, self.crashed, "a producer thread")

    def stop(self) -> "ProducerHistory":
        """Stop sending; each producer flushes for up to ``flush_timeout`` s, and
        whatever is still without an outcome then stays indeterminate."""
        self._stop.set()
        for producing in self._producing:
            assert producing.thread is not None  # started with the history
            producing.thread.join(self.flush_timeout + 30)
            if producing.thread.is_alive():
                self.crashed.append(f"{producing.name} did not stop")
        return self

    # --- the threads ----------------------------------------------------------------
    def _run(self, producing: _Producing) -> None:
        try:
            with entered(self.netns):
                self._produce(producing)
        except BaseException as exc:  # noqa: BLE001 - reported through progressed() and stop()
            self.crashed.append(f"{producing.name}: {exc!r}")

    def _produce(self, producing: _Producing) -> None:
        producer = ck.Producer(self.config)
        seq, started = 0, time.monotonic()
        while not self._stop.is_set():
            if self.rate:
                wait = started + seq / self.rate - time.monotonic()
                if wait > 0:
                    producer.poll(min(wait, 0.05))
                    continue
                if wait < -1.0:  # fell behind (a full queue): no burst to catch up
                    started = time.monotonic() - seq / self.rate
            send = Send(producing.name, seq, value_of(producing.name, seq), time.monotonic())
            where = {}
            if self.partitions is not None:
                send.partition = where["partition"] = self.partitions[seq % len(self.partitions)]
            else:
                send.key = where["key"] = b"k%d" % (seq % 17)
            try:
                producer.produce(self.topic, send.value, on_delivery=functools.partial(
                    self._delivered, producing, send), **where)
            except BufferError:
                producer.poll(0.05)
                continue
            producing.sends.append(send)
            seq += 1
            producer.poll(0)
        if producer.flush(self.flush_timeout) > 0:
            producer.purge()  # what is left gets _PURGE_* errors, which leave it indeterminate
            producer.flush(5)

    def _delivered(self, producing: _Producing, send: Send, error, message) -> None:
        if error is None:
            send.partition, send.offset = message.partition(), message.offset()
            send.done_at = time.monotonic()
            producing.acked += 1
        elif error.code() in _PURGED:
            pass  # we gave up on it; it may have been written
        else:
            send.error = str(error)
            send.done_at = time.monotonic()


# --- consumers ----------------------------------------------------------------------
def _consumer(bootstrap: str, config: dict | None, **extra) -> ck.Consumer:
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"history-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                        "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
                        **extra, **(config or {})})


class ConsumerHistory:
    """A consumer assigned every partition of ``topic`` from the start (no group
    membership), recording each record it is given as ``Read``s."""

    def __init__(self, bootstrap: str, topic: str, partitions, config: dict | None = None,
                 netns: str | None = None):
        self.bootstrap, self.topic, self.config, self.netns = bootstrap, topic, config, netns
        self.partitions = _partition_list(partitions)
        self.reads: list[Read] = []
        self.errors: list[str] = []
        self.crashed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="history-consumer")
        self._thread.start()

    def _run(self) -> None:
        try:
            with entered(self.netns):
                consumer = _consumer(self.bootstrap, self.config)
            try:
                consumer.assign([ck.TopicPartition(self.topic, p, ck.OFFSET_BEGINNING) for p in self.partitions])
                while not self._stop.is_set():
                    for message in consumer.consume(500, 0.2):
                        error = message.error()
                        if error is None:
                            # a record's partition, offset and value (none null here): confluent-kafka types
                            # them Optional for error messages
                            self.reads.append(Read(message.partition(), message.offset(), message.value(),  # pyright: ignore[reportArgumentType]
                                                   time.monotonic()))
                        elif error.code() != ck.KafkaError._PARTITION_EOF:
                            self.errors.append(str(error))
            finally:
                consumer.close()
        except BaseException as exc:  # noqa: BLE001
            self.crashed.append(repr(exc))

    def values(self) -> set[bytes]:
        return {r.value for r in list(self.reads)}

    def progressed(self, count: int):
        """A condition: ``count`` more records read than when asked."""
        target = len(self.reads) + count

        def reached() -> bool:
            if self.crashed:
                raise AssertionError(f"the consumer thread died: {self.crashed[0]}")
            return len(self.reads) >= target
        return reached

    def stop(self, timeout: float = 30.0) -> "ConsumerHistory":
        self._stop.set()
        self._thread.join(timeout)
        return self


def read_everything(bootstrap: str, topic: str, partitions, timeout: float = 60.0, netns: str | None = None,
                    config: dict | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """Each partition read whole: from its start up to the high watermark it had
    when asked.  partition -> [(offset, value)] in offset order.  Raises
    TimeoutError if some partition cannot be read to its end within ``timeout``."""
    parts = _partition_list(partitions)
    deadline = time.monotonic() + timeout
    with entered(netns):
        consumer = _consumer(bootstrap, config, **{"enable.partition.eof": True})
    try:
        bounds = {}
        for p in parts:
            while True:
                try:
                    bounds[p] = consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=5, cached=False)
                    break
                except ck.KafkaException as exc:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no watermarks for {topic}-{p}: {exc}") from None
        position = {p: low for p, (low, _high) in bounds.items()}
        ends = {p: high for p, (_low, high) in bounds.items()}
        found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in parts}
        seen = set()
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        while any(position[p] < ends[p] for p in parts):
            if time.monotonic() > deadline:
                short = {p: f"{position[p]}/{ends[p]}" for p in parts if position[p] < ends[p]}
                raise TimeoutError(f"could not read {topic} to its end within {timeout:.0f} s: {short}")
            for message in consumer.consume(1000, 0.5):
                # confluent-kafka types a message's partition, offset and value Optional (error messages)
                p, offset, value = cast(int, message.partition()), cast(int, message.offset()), message.value()
                error = message.error()
                if error is not None:
                    if error.code() == ck.KafkaError._PARTITION_EOF:
                        position[p] = max(position[p], offset)
                    continue
                if (p, offset, value) not in seen:
                    seen.add((p, offset, value))
                    found[p].append((offset, cast(bytes, value)))
                position[p] = max(position[p], offset + 1)
    finally:
        consumer.close()
    return {p: sorted(entries, key=lambda e: e[0]) for p, entries in found.items()}


# --- the checker --------------------------------------------------------------------
@dataclass
class Report:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    failed_written: int = 0  # failed sends found in the final read (e.g. timed out, yet written)
    indeterminate_written: int = 0
    final_records: int = 0
    live_reads: int = 0
    foreign: int = 0  # values in the final read that no recorded producer sent
    lost: list = field(default_factory=list)  # [Send]
    duplicated: list = field(default_factory=list)  # [(value, [(partition, offset), ...])]
    wrong_offset: list = field(default_factory=list)  # [(Send, value found there or None)]
    inconsistent: list = field(default_factory=list)  # [((partition, offset), [values])]
    reordered: list = field(default_factory=list)  # [(producer, partition, (Send, offset), (Send, offset))]
    vanished: list = field(default_factory=list)  # [Read]

    ANOMALIES = ("lost", "duplicated", "wrong_offset", "inconsistent", "reordered", "vanished")
    EXPLAINED = {
        "lost": "acknowledged, missing from the final read",
        "duplicated": "one value at several offsets",
        "wrong_offset": "acknowledged offset holding another value (or nothing)",
        "inconsistent": "one offset read with different values",
        "reordered": "a producer's acknowledged values out of send order in a partition",
        "vanished": "read by the live consumer, missing from the final read",
    }

    @property
    def anomalies(self) -> dict[str, list]:
        return {name: getattr(self, name) for name in self.ANOMALIES if getattr(self, name)}

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def summary(self, examples: int = 5) -> str:
        lines = [
            f"{self.sent} sends: {self.acked} acknowledged, {self.failed} failed "
            f"({self.failed_written} of them written anyway), {self.indeterminate} indeterminate "
            f"({self.indeterminate_written} of them written)",
            f"final read: {self.final_records} records ({self.foreign} not from these producers); "
            f"live reads: {self.live_reads}",
            "anomalies: " + ", ".join(f"{name} {len(getattr(self, name))}" for name in self.ANOMALIES),
        ]
        for name, found in self.anomalies.items():
            lines.append(f"  {name} ({self.EXPLAINED[name]}), first {min(examples, len(found))} of {len(found)}:")
            lines += [f"    {_show(example)}" for example in found[:examples]]
        return "\n".join(lines)

    def assert_valid(self, examples: int = 5) -> "Report":
        text = self.summary(examples)
        print(text)
        if not self.valid:
            raise AssertionError("history check failed:\n" + text)
        return self


def _show(example) -> str:
    if isinstance(example, bytes):
        return example.decode(errors="replace")
    if isinstance(example, (tuple, list)):
        return "(" + ", ".join(_show(e) for e in example) + ")"
    return repr(example)


def _sends_of(producers) -> list[Send]:
    if hasattr(producers, "sends"):
        return list(producers.sends)
    found = []
    for item in producers:
        found += [item] if isinstance(item, Send) else list(item.sends)
    return found


def _reads_of(consumer_reads) -> list[Read]:
    if hasattr(consumer_reads, "reads"):
        consumer_reads = consumer_reads.reads
    found = []
    for item in consumer_reads:
        if hasattr(item, "reads"):
            found += _reads_of(item)
        else:
            found.append(Read(*item[:3]))
    return found


def check(producers, reads: dict[int, list[tuple[int, bytes]]], consumer_reads=()) -> Report:
    """Check a history: ``producers`` (a ProducerHistory, a list of them, or Sends),
    ``reads`` (read_everything's answer) and ``consumer_reads`` (a
    ConsumerHistory, a list of them, or (partition, offset, value) tuples)."""
    sends = _sends_of(producers)
    live = _reads_of(consumer_reads)
    final = [Read(p, o, v) for p, entries in reads.items() for o, v in entries]
    by_value = {}
    for send in sends:
        assert by_value.setdefault(send.value, send) is send, f"two sends of one value {send.value!r}"
    report = Report(sent=len(sends), final_records=len(final), live_reads=len(live))
    statuses = [s.status for s in sends]
    report.acked, report.failed = statuses.count("acked"), statuses.count("failed")
    report.indeterminate = statuses.count("indeterminate")

    final_at: dict[tuple[int, int], bytes] = {}
    final_where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for r in final:
        final_at.setdefault((r.partition, r.offset), r.value)
        final_where[r.value].append((r.partition, r.offset))
    report.foreign = sum(1 for v in final_where if v not in by_value)
    report.failed_written = sum(1 for s in sends if s.status == "failed" and s.value in final_where)
    report.indeterminate_written = sum(1 for s in sends if s.status == "indeterminate" and s.value in final_where)

    # one value, one offset; one offset, one value (across every read)
    positions: dict[bytes, set] = defaultdict(set)
    values_at: dict[tuple[int, int], list] = defaultdict(list)
    for r in itertools.chain(final, live):
        positions[r.value].add((r.partition, r.offset))
        if r.value not in values_at[(r.partition, r.offset)]:
            values_at[(r.partition, r.offset)].append(r.value)
    report.duplicated = sorted(((v, sorted(where)) for v, where in positions.items() if len(where) > 1),
                               key=lambda d: d[1][0])
    report.inconsistent = sorted((at, values) for at, values in values_at.items() if len(values) > 1)

    acked_sends = [s for s in sends if s.status == "acked"]
    report.lost = [s for s in acked_sends if s.value not in final_where]
    acked_at = [(s, (cast(int, s.partition), cast(int, s.offset))) for s in acked_sends]  # set once acked
    report.wrong_offset = [(s, final_at.get(at)) for s, at in acked_at if final_at.get(at) != s.value]
    report.vanished = sorted({Read(*r[:3]) for r in live if r.value not in final_where},
                             key=lambda r: (r.partition, r.offset))

    # per producer and partition, acknowledged values stored in send order
    stored: dict[tuple[str, int], list[tuple[Send, int]]] = defaultdict(list)
    for s in sorted(acked_sends, key=lambda s: (s.producer, s.seq)):
        for partition, offset in final_where.get(s.value, [])[:1]:
            stored[(s.producer, partition)].append((s, offset))
    for (producer, partition), sequence in sorted(stored.items()):
        for earlier, later in zip(sequence, sequence[1:]):
            if later[1] <= earlier[1]:
                report.reordered.append((producer, partition, earlier, later))
    return report
