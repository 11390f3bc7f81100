"""Transactional clients that ``test_transactions.py`` runs as subprocesses, so
it can SIGKILL them at any point (confluent-kafka only; nothing of hpbroker)::

    python tests/integration/txn_pipeline.py pipeline BOOTSTRAP IN OUT GROUP TXN_ID INSTANCE JOURNAL [--batch N]
    python tests/integration/txn_pipeline.py open BOOTSTRAP TOPIC TXN_ID --partitions 0,1 --timeout-ms 3000

``pipeline``: exactly-once consume-transform-produce.  It subscribes to IN
(read_committed, a static member of GROUP), and per batch of up to N input
records writes, in one transaction, each input number ``n`` to both
partitions of OUT (value ``n``; headers ``txn``, the transaction's tag
``INSTANCE-seq``, and ``count``, how many records the transaction wrote) and
the consumed offsets (``send_offsets_to_transaction``), then commits.  After
``commit_transaction`` (or ``abort_transaction``) returns it appends
``committed TAG INPUTS`` (``aborted TAG INPUTS``) to JOURNAL.  On any error it
exits with code 3 (after aborting when it can): whoever runs it starts a new
instance, which fences this one's transaction and resumes from the committed
offsets.

``open``: begins a transaction, writes one record (``open-<i>``) to each of
the partitions and flushes them, prints ``ready`` and then waits to be
killed, the transaction left open.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import time

import confluent_kafka as ck


def _pipeline(args: argparse.Namespace) -> None:
    faulthandler.register(signal.SIGUSR1)  # a stalled pipeline shows where it is
    debug = {"debug": os.environ["TXN_PIPELINE_DEBUG"]} if os.environ.get("TXN_PIPELINE_DEBUG") else {}
    # No re-bootstrap while the broker restarts: librdkafka 2.16 then decommissions the broker it knew,
    # and send_offsets_to_transaction waits on that dead handle for good, its timeout ignored
    # (confluentinc/librdkafka#5511)
    common = {"bootstrap.servers": args.bootstrap, "metadata.recovery.strategy": "none", **debug}
    producer = ck.Producer({**common, "transactional.id": args.txn_id, "transaction.timeout.ms": 10000,
                            "linger.ms": 5})
    producer.init_transactions(60)  # fences the previous instance before we read a thing
    # Kafka's default session (45 s), longer than a broker restart: librdkafka 2.16, its session
    # timed out while the broker was down, sends a heartbeat (or an auto-commit) with the member id
    # it just cleared, which Kafka and hpbroker both answer FENCED_INSTANCE_ID, fatal to a static
    # member (confluentinc/librdkafka#5585).  A new instance replaces the old member at once anyway.
    consumer = ck.Consumer({**common, "group.id": args.group, "error_cb": _exit_on_fatal,
                            "group.instance.id": "pipeline", "session.timeout.ms": 45000,
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([args.input])
    journal = open(args.journal, "a", buffering=1)
    seq = 0
    while True:
        inputs: list[ck.Message] = []
        for m in consumer.consume(args.batch, 0.5):
            error = m.error()
            if error is None:
                inputs.append(m)
            elif error.fatal():
                raise ck.KafkaException(error)
        if not inputs:
            continue
        tag = f"{args.instance}-{seq}"
        seq += 1
        headers = [("txn", tag.encode()), ("count", str(2 * len(inputs)).encode())]
        step = "begin"
        producer.begin_transaction()
        try:
            step = "produce"
            ends: dict[int, int] = {}
            for m in inputs:
                value, partition, offset = m.value(), m.partition(), m.offset()
                assert value is not None and partition is not None and offset is not None
                for out in (0, 1):
                    _produce(producer, args.output, value, out, headers)
                ends[partition] = max(ends.get(partition, 0), offset + 1)
            offsets = [ck.TopicPartition(args.input, p, o) for p, o in sorted(ends.items())]
            step = "send_offsets"
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            step = "commit"
            producer.commit_transaction(30)
        except ck.KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, ck.KafkaError) and error.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                    journal.write(f"aborted {tag} {len(inputs)}\n")
                except ck.KafkaException:
                    pass
            print(f"{time.strftime('%H:%M:%S')} pipeline {args.instance}: {tag} failed at {step}: {exc}",
                  file=sys.stderr, flush=True)
            os._exit(3)  # no close: the next instance fences and takes over
        journal.write(f"committed {tag} {len(inputs)}\n")


def _exit_on_fatal(error: ck.KafkaError) -> None:
    """A fatal consumer error leaves the consumer returning nothing for
    good: the instance ends, and the test starts the next, as after a kill."""
    if error.fatal():
        print(f"{time.strftime('%H:%M:%S')} pipeline: fatal consumer error: {error}", file=sys.stderr, flush=True)
        os._exit(4)


def _produce(producer: ck.Producer, topic: str, value: bytes, partition: int, headers) -> None:
    while True:
        try:
            producer.produce(topic, value=value, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def _open(args: argparse.Namespace) -> None:
    producer = ck.Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.txn_id,
                            "transaction.timeout.ms": args.timeout_ms, "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in args.partitions:
        producer.produce(args.topic, value=b"open-%d" % p, partition=p)
    assert producer.flush(30) == 0, "the open transaction's records were not delivered"
    print("ready", flush=True)
    while True:
        signal.pause()  # until killed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    pipe = sub.add_parser("pipeline")
    for name in ("bootstrap", "input", "output", "group", "txn_id", "instance", "journal"):
        pipe.add_argument(name)
    pipe.add_argument("--batch", type=int, default=20)
    opened = sub.add_parser("open")
    for name in ("bootstrap", "topic", "txn_id"):
        opened.add_argument(name)
    opened.add_argument("--partitions", type=lambda s: [int(p) for p in s.split(",")], default=[0])
    opened.add_argument("--timeout-ms", type=int, default=60000)
    args = parser.parse_args(argv)
    if args.mode == "pipeline":
        _pipeline(args)
    else:
        _open(args)


if __name__ == "__main__":
    main()
