"""Where a replicated record's CPU goes: three brokers on a real ZooKeeper, per broker.

    .venv/bin/python bench/cluster_cpu.py [--rate 300] [--workers 1] [--profile DIR]

Starts ZooKeeper and three brokers (``--workers`` each), creates one topic of
one partition with three replicas (min.insync.replicas=2), and reports, per
broker: its ZooKeeper connections (``cons``; one per broker), its CPU while
idle, and its CPU while a confluent-kafka producer sends 100 B records at
``--rate`` per second (acks=all, idempotent, linger.ms=1), the leader's and
the followers' apart.  With ``--profile DIR`` py-spy (``pip install py-spy``)
samples every worker meanwhile and writes raw profiles there
(``leader-<id>.txt``, ``follower-<id>.txt``), and the busiest frames of each
are printed.
"""

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from harness.cluster import Cluster  # noqa: E402
from harness.zookeeper import ZooKeeperServer, four_letter  # noqa: E402

TOPIC = "replicated"
MEASURE_S = 15
IDLE_FRAMES = ("Condition.wait (threading.py", "_worker (concurrent/futures/thread.py", "EpollSelector.select (")


def cpu_per_second(cluster: Cluster, seconds: float) -> dict[int, float]:
    before = {i: b.cpu_seconds() for i, b in cluster.brokers.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {i: 1000 * (b.cpu_seconds() - before[i]) / elapsed for i, b in cluster.brokers.items()}


def busiest(profile: Path, top: int = 12) -> list[tuple[float, str]]:
    """Self time of the busiest frames, idle waits left out, as shares of the busy samples."""
    own: collections.Counter = collections.Counter()
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or stack.rsplit(";", 1)[-1].startswith(IDLE_FRAMES):
            continue
        own[stack.rsplit(";", 1)[-1]] += int(count)
        total += int(count)
    return [(100 * n / total, frame) for frame, n in own.most_common(top)] if total else []


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=300, help="records per second (default 300)")
    parser.add_argument("--workers", type=int, default=1, help="workers per broker (default 1)")
    parser.add_argument("--profile", type=Path, help="directory for py-spy profiles of every worker")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if args.profile and not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hpbroker-cluster-cpu-"))
    zookeeper = ZooKeeperServer(work / "zookeeper").start()
    cluster = Cluster(f"{zookeeper.connect}/bench", work, 3,
                      overrides={"num.workers": str(args.workers), "min.insync.replicas": "2"})
    try:
        before = four_letter(zookeeper.port, b"cons").decode().count("sid=")
        cluster.start_all()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: its futures die with it
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
        cluster.wait_in_sync(TOPIC, 1)
        sessions = four_letter(zookeeper.port, b"cons").decode().count("sid=") - before
        idle = cpu_per_second(cluster, 10)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 1,
                             "enable.idempotence": True})
        stop = threading.Event()

        def produce() -> None:
            sent, started = 0, time.monotonic()
            while not stop.is_set():
                producer.produce(TOPIC, b"x" * 100)
                producer.poll(0)
                sent += 1
                delay = started + sent / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            producer.flush(10)
        thread = threading.Thread(target=produce)
        thread.start()
        time.sleep(3)
        leader = cluster.leader_of(TOPIC, 0)
        spies = []
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for broker_id, broker in cluster.brokers.items():
                role = "leader" if broker_id == leader else "follower"
                for pid in broker.worker_pids().values():
                    out = args.profile / f"{role}-{broker_id}-{pid}.txt"
                    spies.append((out, subprocess.Popen(
                        [spy, "record", "-p", str(pid), "-d", str(MEASURE_S), "-r", "200", "-f", "raw", "--gil", "-o",
                         str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        busy = cpu_per_second(cluster, MEASURE_S)
        for _, process in spies:
            process.wait()
        stop.set()
        thread.join()
    finally:
        cluster.close()
        zookeeper.stop()
    print(f"3 brokers x {args.workers} worker(s); ZooKeeper connections of the brokers: {sessions}")
    print("| broker | role | idle CPU ms/s | CPU ms/s at {0}/s | CPU ms per record |".format(args.rate))
    print("| --- | --- | --- | --- | --- |")
    for broker_id in sorted(busy):
        role = "leader" if broker_id == leader else "follower"
        print(f"| {broker_id} | {role} | {idle[broker_id]:.1f} | {busy[broker_id]:.1f} | "
              f"{(busy[broker_id] - idle[broker_id]) / args.rate:.2f} |")
    for out, _ in spies:
        print(f"\n{out.name} (busiest frames, share of busy samples; profiling slows the broker):")
        for share, frame in busiest(out):
            print(f"  {share:5.1f}% {frame[:140]}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
