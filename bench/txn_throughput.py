"""Transactional produce against idempotent produce, in the same run.

    .venv/bin/python bench/txn_throughput.py [--records N] [--small-records N] [--size 100] [--rounds 2]

One standalone hpbroker (two workers), one confluent-kafka producer
(acks=all, linger 5 ms), records spread over two partitions.  Each round
produces records three ways, one after the other: N idempotent (no
transactions), N in transactions of 10,000 records, and (fewer, as each
costs far more) ``--small-records`` in transactions of 100 records; it
reports records/s, the broker's CPU µs per record, and the ratio of each
transactional figure to the idempotent one of the same round.  Any failed
delivery fails the run.
A transaction of 100 records costs a FindCoordinator-free but otherwise full
round of AddPartitionsToTxn, EndTxn (two writes to ``__transaction_state``)
and one marker per partition, so it shows the coordinator's fixed cost;
10,000 records show what is left when that cost is spread.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from e2e import Meter, machine_info  # noqa: E402

from harness.broker import Broker  # noqa: E402

PARTITIONS = 2


ERRORS: list[str] = []


def _delivered(err, _msg) -> None:
    if err is not None:
        ERRORS.append(str(err))


def _producer(broker: Broker, transactional_id: str | None) -> ck.Producer:
    conf = {"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000, "compression.type": "none",
            "on_delivery": _delivered}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    return ck.Producer(conf)


def _send(p: ck.Producer, topic: str, payload: bytes, start: int, count: int) -> None:
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.005)


def run_idempotent(broker: Broker, topic: str, n: int, payload: bytes) -> dict:
    p = _producer(broker, None)
    p.produce(topic, b"warm-up", partition=0)
    p.flush(30)
    meter = Meter(broker)
    _send(p, topic, payload, 0, n)
    left = p.flush(120)
    m = meter.stop()
    assert not left, f"{left} records undelivered"
    return {**m, "records": n}


def run_transactional(broker: Broker, topic: str, n: int, payload: bytes, per_txn: int, tid: str) -> dict:
    p = _producer(broker, tid)
    p.init_transactions(30)
    p.begin_transaction()  # warm-up: coordinator found, partitions' leaders connected
    p.produce(topic, b"warm-up", partition=0)
    p.produce(topic, b"warm-up", partition=1)
    p.commit_transaction(30)
    meter = Meter(broker)
    sent = 0
    while sent < n:
        count = min(per_txn, n - sent)
        p.begin_transaction()
        _send(p, topic, payload, sent, count)
        p.commit_transaction(60)
        sent += count
    m = meter.stop()
    p.flush(30)
    return {**m, "records": n, "transactions": (n + per_txn - 1) // per_txn}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--small-records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    payload = os.urandom(args.size)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hpbroker-txn-bench-") as tmp:
        broker = Broker(Path(tmp) / "data", Path(tmp) / "broker.log").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for r in range(args.rounds):
                topic = f"txn-bench-{r}"
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                base = run_idempotent(broker, topic, args.records, payload)
                big = run_transactional(broker, topic, args.records, payload, 10_000, f"bench-big-{r}")
                small = run_transactional(broker, topic, args.small_records, payload, 100, f"bench-small-{r}")
                assert not ERRORS, f"{len(ERRORS)} deliveries failed, the first: {ERRORS[0]}"
                for name, m in (("idempotent", base), ("transactions of 10,000", big),
                                ("transactions of 100", small)):
                    rps = m["records"] / m["wall"]
                    cpu_us = m["broker_cpu"] / m["records"] * 1e6
                    rows.append((r + 1, name, rps, cpu_us, rps / (base["records"] / base["wall"]),
                                 cpu_us / (base["broker_cpu"] / base["records"] * 1e6)))
        finally:
            broker.stop()
    info = machine_info()
    print(f"machine: {info['nproc']} CPUs, {info['cpu']}, {info['memory']}, Linux {info['kernel']}, "
          f"Python {info['python']}, confluent-kafka {info['confluent-kafka']}")
    print(f"{args.records} records of {args.size} B ({args.small_records} in transactions of 100), "
          f"{PARTITIONS} partitions, acks=all, linger 5 ms")
    print("| round | produce | records/s | broker CPU µs/record | records/s vs idempotent | CPU vs idempotent |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r, name, rps, cpu_us, rps_ratio, cpu_ratio in rows:
        print(f"| {r} | {name} | {rps:,.0f} | {cpu_us:.2f} | {rps_ratio:.2f} | {cpu_ratio:.2f} |")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    code = main()
    print(f"({time.time() - t0:.0f} s)")
    sys.exit(code)
