"""The ZooKeeper-coordinated consumer against librdkafka's, on the same cluster and data.

    .venv/bin/python bench/zkconsumer_e2e.py [--records N] [--size B] [--rounds R]

Three cluster-mode brokers on a real ZooKeeper (Kafka's default timeouts,
num.workers=1 each), one topic of 6 partitions with replication factor 3,
filled once.  Each round reads the whole topic from the beginning twice, in
alternating order: once with one ``ZookeeperConsumer`` member (a fresh group,
auto_offset_reset=smallest, offsets in ZooKeeper), once with one confluent-kafka
group consumer (subscribe, auto.offset.reset=earliest).  Reported: the time
from construction to the first record (joining the group: the broker-side
group waits out group.initial.rebalance.delay.ms, 3 s), the read rate from the
first record to the last, the client's CPU for the whole read, and the ratio
of the two rates in the same round.

Then how long a rebalance takes: with one member owning all six partitions, a
second joins; the time from the second's constructor starting until the two
own disjoint halves (the default rebalance_backoff_ms, 2000, applies to a
claim that meets a partition not yet released).
"""

import argparse
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import confluent_kafka as ck  # noqa: E402

from bench.cluster_e2e import THROUGHPUT_CLIENT, create_topic, start_cluster, tree_state  # noqa: E402
from bench.e2e import client_cpu, machine_info, render  # noqa: E402
from harness.zookeeper import ZooKeeperServer  # noqa: E402
from hpbroker.zkconsumer import ZookeeperConsumer  # noqa: E402

TOPIC = "zkc"
PARTITIONS = 6


def fill(bootstrap: str, records: int, size: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", **THROUGHPUT_CLIENT})
    payload = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(300):
        raise RuntimeError("the topic could not be filled")


class Reading:
    """Times one reader: construction to the first record (joining the group),
    then the first record to the last (the read rate), and the client's CPU."""

    def __init__(self, records: int):
        self.records, self.got = records, 0
        self.c0, self.t0 = client_cpu(), time.perf_counter()
        self.first_at = self.first_count = None

    def took(self, n: int) -> bool:
        """Count n more records; True once all have come."""
        if n and self.first_at is None:
            self.first_at, self.first_count = time.perf_counter(), n
        self.got += n
        if self.got >= self.records:
            self.last_at, self.cpu = time.perf_counter(), client_cpu() - self.c0
            return True
        return False

    def result(self) -> tuple[float, float, float]:
        """(seconds to the first record, records/s after it, client CPU s)."""
        assert self.first_at is not None and self.first_count is not None, "called before took() was done"
        return (self.first_at - self.t0, (self.got - self.first_count) / (self.last_at - self.first_at), self.cpu)


def read_with_zkconsumer(connect: str, records: int) -> tuple[float, float, float]:
    reading = Reading(records)
    with ZookeeperConsumer(connect, f"zk-{uuid.uuid4().hex[:8]}", [TOPIC], auto_offset_reset="smallest",
                           auto_commit=False) as consumer:
        while not reading.took(len(consumer.poll(1.0))):
            pass
    return reading.result()


def read_with_librdkafka(bootstrap: str, records: int) -> tuple[float, float, float]:
    reading = Reading(records)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{uuid.uuid4().hex[:8]}",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        while not reading.took(sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)):
            pass
    finally:
        consumer.close()
    return reading.result()


def rebalance_time(connect: str) -> float:
    group = f"rb-{uuid.uuid4().hex[:8]}"
    everything = {(TOPIC, p) for p in range(PARTITIONS)}
    with ZookeeperConsumer(connect, group, [TOPIC]) as first:
        if first.assignment() != everything:
            raise RuntimeError(f"the only member owns {sorted(first.assignment())}")
        t0 = time.perf_counter()
        with ZookeeperConsumer(connect, group, [TOPIC]) as second:
            while True:
                a, b = first.assignment(), second.assignment()
                if a | b == everything and not a & b and len(a) == len(b) == PARTITIONS // 2:
                    return time.perf_counter() - t0
                time.sleep(0.001)  # the members rebalance on their own threads; look again


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=600_000, help="records in the topic (default 600000)")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both readers (default 3)")
    ap.add_argument("--rebalances", type=int, default=5, help="rebalance trials (default 5)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: no broker left behind

    tree = tree_state()
    tmp = Path(tempfile.mkdtemp(prefix="hpbroker-zkconsumer-e2e-"))
    zk = ZooKeeperServer(tmp / "zookeeper")
    rows, rebalances = [], []
    try:
        zk.start()
        cluster = start_cluster(zk, tmp, "cluster")
        try:
            bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
            create_topic(bootstrap, TOPIC, PARTITIONS, 3)
            fill(bootstrap, args.records, args.size)
            for round_no in range(args.rounds):
                readers = [("ZookeeperConsumer", lambda: read_with_zkconsumer(cluster.connect, args.records)),
                           ("confluent-kafka", lambda: read_with_librdkafka(bootstrap, args.records))]
                if round_no % 2:
                    readers.reverse()
                results = {name: run() for name, run in readers}
                base = results["confluent-kafka"][1]
                for name, (joined, rate, cpu) in results.items():
                    rows.append([round_no + 1, name, f"{joined:.2f}", f"{rate:,.0f}",
                                 f"{rate * args.size / 2**20:.1f}", f"{cpu:.1f}", f"{rate / base:.2f}"])
            rebalances = sorted(rebalance_time(cluster.connect) for _ in range(args.rebalances))
        finally:
            cluster.close()
    finally:
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    info = machine_info()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"tree: {tree}")
    print("command: .venv/bin/python bench/zkconsumer_e2e.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    text, md = render(rows, ["round", "reader", "s to the first record", "records/s after it", "MB/s",
                             "client CPU s", "rate vs confluent-kafka"])
    print(f"\nreading {args.records:,} records of {args.size} B from the beginning\n\n{text}\n\nmarkdown:\n\n{md}")
    print("\nrebalance, a second member joining one that owns all 6 partitions, seconds: "
          + ", ".join(f"{r:.3f}" for r in rebalances))
    return 0


if __name__ == "__main__":
    sys.exit(main())
