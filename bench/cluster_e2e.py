"""Cluster mode end to end: three brokers on a real ZooKeeper, confluent-kafka as the client.

    .venv/bin/python bench/cluster_e2e.py [--quick] [--skip-throughput] [--skip-failover]

1. Produce throughput and latency, in the same run, phases alternating in
   order round by round: one standalone broker with acks=1, against three
   brokers (replication factor 3, min.insync.replicas=2) with acks=all, and
   acks=1 on the same cluster (which separates waiting for followers from
   the rest).  Same client settings, record sizes and partition count (3).
   Throughput: as many records as the client can queue (batching as
   bench/e2e.py), timed to the producer's flush, with the brokers' CPU and
   minor page faults (pages they touched for the first time) per byte, read
   once every replica holds the same bytes (acks=1's followers may still be
   catching up at the flush); each throughput phase starts after
   the same write-and-delete of memory (``bench/memory_probe.py``), so none
   pays the host's first touches for its place, nor its handling of the
   pages an earlier write-and-delete freed (steal time, shown beside the
   other load), and a ``sync``, so none pays for the writeback of the bytes
   of the phases before it.  Latency: produce() to delivery
   callback, paced at a fixed rate of records/s with linger.ms=1, the first
   second dropped.
2. Unavailability on failover: a steady idempotent acks=all producer on a
   single-partition topic (RF 3) timestamps every acknowledgement.  SIGKILL of
   the partition's leader: time to the first acknowledgement of a record
   produced after the kill (so it went through the new leader), with
   zookeeper.session.timeout.ms at 18000 (the default) and 6000; beside it
   when ZooKeeper named the new leader and when that broker logged taking
   over (the broker's side; the rest is the client finding out).  SIGTERM of
   the leader (controlled shutdown): the longest gap between acknowledgements.
   Each three times; the broker comes back and rejoins the ISR between trials.

Every broker runs with num.workers=1 and worker.cpu.affinity=none (three
brokers share the 2 cores here; pinned, all three workers would be on CPU 0).
Settings are Kafka's defaults except those in NON_DEFAULT, the session
timeout of the second failover run and any --cluster-set.
"""

import argparse
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.e2e import GB, MB, client_cpu, machine_busy, machine_info, machine_steal, render  # noqa: E402
from bench.memory_probe import describe as page_cache_state, warm  # noqa: E402
from bench.targets import tree_minor_faults  # noqa: E402
from bench.wakeup_probe import describe as wake_up_state  # noqa: E402
from harness.broker import Broker, BrokerError  # noqa: E402
from harness.cluster import FAST, Cluster  # noqa: E402
from harness.waiting import wait_for  # noqa: E402
from harness.zookeeper import ZooKeeperServer  # noqa: E402

PARTITIONS = 3  # one leader per broker in the cluster
# worker.cpu.affinity=none: three brokers share this host's cores (pinned, each
# broker's one worker would be on CPU 0, the three together on one core)
NON_DEFAULT = {"num.workers": "1", "min.insync.replicas": "2", "worker.cpu.affinity": "none"}
# Cluster() applies the tests' FAST settings (short timeouts); put Kafka's defaults back.
KAFKA_DEFAULTS = {
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.connection.timeout.ms": "18000",  # default: the session timeout
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.backoff.ms": "1000",
    "offsets.topic.num.partitions": "50",
    "group.initial.rebalance.delay.ms": "3000",
    "default.replication.factor": "1",
    "controlled.shutdown.retry.backoff.ms": "5000",
}
_unrestored = set(FAST) - set(KAFKA_DEFAULTS) - set(NON_DEFAULT)
assert not _unrestored, f"harness/cluster.py FAST gained {_unrestored}: restore their defaults here"

# Same client for every target; only acks differs.
THROUGHPUT_CLIENT = {"linger.ms": 20, "batch.size": 1_000_000, "batch.num.messages": 100_000,
                     "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 262_144,
                     "compression.type": "none"}
LATENCY_CLIENT = {"linger.ms": 1, "compression.type": "none"}
# Failover: librdkafka defaults but for idempotence (which implies acks=all)
FAILOVER_CLIENT = {"enable.idempotence": True, "acks": "all"}


def start_cluster(zk: ZooKeeperServer, tmp: Path, name: str, extra: dict | None = None) -> Cluster:
    (tmp / name).mkdir()
    cluster = Cluster(f"{zk.connect}/{name}", tmp / name, 3,
                      overrides={**KAFKA_DEFAULTS, **NON_DEFAULT, **(extra or {})})
    try:
        cluster.start_all()
    except BaseException:
        cluster.close()
        raise
    return cluster


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(30)


def pct(sorted_values: list, q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


# --- 1. throughput and latency --------------------------------------------------------
class Target:
    """Where a phase produces: a bootstrap, its acks, and the brokers whose CPU counts."""

    def __init__(self, name: str, bootstrap: str, acks, brokers: list[Broker], replication: int):
        self.name, self.bootstrap, self.acks = name, bootstrap, acks
        self.brokers, self.replication = brokers, replication

    def cpu(self) -> float:
        return sum(sum(b.cpu_times()) for b in self.brokers)

    def minor_faults(self) -> int:
        """Pages the brokers touched for the first time (on a VM returning free memory to its host,
        a fault into the host as well)."""
        return sum(tree_minor_faults(b.pid) for b in self.brokers)

    def topic(self, kind: str, size: int) -> str:
        return f"{kind}-{size}-{self.name.replace(' ', '-').replace('=', '')}"

    def replicas_level(self, topic: str) -> bool:
        """Every broker holds as many bytes of each of ``topic``'s partitions as
        the others (the followers have caught up; trivially so for one broker)."""
        for part in range(PARTITIONS):
            sizes = {sum(f.stat().st_size for f in (b.data_dir / f"{topic}-{part}").glob("*.log"))
                     for b in self.brokers}
            if len(sizes) > 1:
                return False
        return True


def throughput(target: Target, size: int, n: int) -> dict:
    """n records of size bytes as fast as the client goes; wall time from the first produce() to flush()."""
    topic = target.topic("tput", size)
    p = ck.Producer({"bootstrap.servers": target.bootstrap, "acks": target.acks, **THROUGHPUT_CLIENT})
    for part in range(PARTITIONS):  # metadata and connections to every leader before the clock starts
        p.produce(topic, b"warm-up", partition=part)
    if p.flush(30):
        raise RuntimeError(f"{target.name}: warm-up not delivered")
    payload = os.urandom(size)
    produce_one, poll = p.produce, p.poll
    b0, f0, c0, m0, s0 = target.cpu(), target.minor_faults(), client_cpu(), machine_busy(), machine_steal()
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce_one(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:  # bounded local queue: wait for deliveries
                poll(0.005)
        if i & 0xFFFF == 0:
            poll(0)
    left = p.flush(300)
    wall = time.perf_counter() - t0
    # with acks=1 the followers may still be fetching: their catching up is part of the cost of these bytes
    wait_for(lambda: target.replicas_level(topic), 120, f"{target.name}'s followers to catch up", interval=0.1)
    broker, client = target.cpu() - b0, client_cpu() - c0
    return {"rps": n / wall, "mbps": n * size / wall / MB, "wall": wall, "broker_cpu": broker, "client_cpu": client,
            "faults": target.minor_faults() - f0,
            "other_cpu": max(0.0, machine_busy() - m0 - broker - client), "steal": machine_steal() - s0,
            "bytes": n * size, "undelivered": left}


def latency(target: Target, size: int, rate: float, seconds: float) -> dict:
    """produce() to delivery callback, paced at rate records/s; the first second is warm-up."""
    topic = target.topic("lat", size)
    p = ck.Producer({"bootstrap.servers": target.bootstrap, "acks": target.acks, **LATENCY_CLIENT})
    for part in range(PARTITIONS):
        p.produce(topic, b"warm-up", partition=part)
    p.flush(30)
    samples, errors = [], []

    def delivered(err, msg):
        # msg.latency(): librdkafka's clock from produce() to this callback
        (errors if err else samples).append(err or msg.latency())

    filler = os.urandom(size)
    total, warm = int(rate * (seconds + 1)), int(rate)
    b0, sent, t0 = target.cpu(), 0, time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - t0) * rate) + 1)  # what the schedule owes by now
        while sent < due:
            try:
                p.produce(topic, filler, partition=sent % PARTITIONS, on_delivery=delivered)
                sent += 1
            except BufferError:
                p.poll(0.001)
        p.poll(0)
        time.sleep(0.0002)
    achieved = sent / (time.monotonic() - t0)
    p.flush(120)
    cpu = (target.cpu() - b0) / (time.monotonic() - t0)  # until the last ack: a backlog costs too
    values = sorted(samples[warm:])
    return {"achieved": achieved, "samples": len(values), "errors": len(errors), "cpu": cpu,
            "p50": pct(values, 0.5) * 1e3, "p99": pct(values, 0.99) * 1e3, "p999": pct(values, 0.999) * 1e3,
            "max": values[-1] * 1e3}


def run_throughput(args, tmp: Path, zk: ZooKeeperServer) -> tuple[list, list, list]:
    standalone = Broker(tmp / "standalone", overrides={"num.workers": "1"})
    cluster = None
    try:
        standalone.start()
        cluster = start_cluster(zk, tmp, "perf", args.cluster_set)
        one = [standalone]
        three = list(cluster.brokers.values())
        targets = [Target("standalone acks=1", standalone.bootstrap, 1, one, 1),
                   Target("cluster acks=all", cluster.bootstrap, "all", three, 3),
                   Target("cluster acks=1", cluster.bootstrap, 1, three, 3)]
        for t in targets:
            for size in args.sizes:
                for kind in ("tput", "lat"):
                    create_topic(t.bootstrap, t.topic(kind, size), PARTITIONS, t.replication)
                    if t.replication == 3:
                        cluster.wait_in_sync(t.topic(kind, size), PARTITIONS)
        tput = {(t.name, s): [] for t in targets for s in args.sizes}
        lat = {(t.name, s, r): [] for t in targets for s in args.sizes for r in args.latency_rates}
        for rnd in range(args.rounds):
            order = targets if rnd % 2 == 0 else targets[::-1]  # alternate so drift does not favour one
            for size in args.sizes:
                n = int(args.mb * MB / size)
                for t in order:
                    print(f"round {rnd + 1}: {t.name}, {n:,} x {size} B ...", file=sys.stderr, flush=True)
                    # the same state of memory for every target (bench/memory_probe.py): three
                    # copies of the bytes and room besides, whichever target writes them
                    warm(str(tmp), int(4 * 3 * n * size / 2**20))
                    # and no writeback owed: what earlier phases left dirty is written back now, not by the
                    # kernel's flusher during this phase, on these cores, into this phase's figures
                    os.sync()
                    tput[(t.name, size)].append(throughput(t, size, n))
            for rate in args.latency_rates:
                for size in args.sizes:
                    for t in order:
                        print(f"round {rnd + 1}: {t.name}, latency {size} B at {rate:.0f}/s ...", file=sys.stderr,
                              flush=True)
                        lat[(t.name, size, rate)].append(latency(t, size, rate, args.latency_seconds))
        standalone.stop()
        cluster_logs = [b.log_path for b in three]
    finally:
        if standalone.proc is not None and standalone.proc.poll() is None:
            standalone.kill()
        if cluster is not None:
            cluster.close()

    ncpu = len(os.sched_getaffinity(0))
    rows, lrows = [], []
    base = targets[0].name
    for size in args.sizes:
        for t in targets:
            rs = tput[(t.name, size)]
            ratio = "/".join(f"{r['rps'] / b['rps']:.2f}" for r, b in zip(rs, tput[(base, size)]))
            rows.append([f"{size} B", t.name, " / ".join(f"{r['rps']:,.0f}" for r in rs),
                         " / ".join(f"{r['mbps']:.1f}" for r in rs), ratio if t.name != base else "1",
                         " / ".join(f"{r['broker_cpu'] / (r['bytes'] / GB):.1f}" for r in rs),
                         " / ".join(f"{r['faults'] / (r['bytes'] / MB):.0f}" for r in rs),
                         " / ".join(f"{100 * r['client_cpu'] / r['wall'] / ncpu:.0f}%" for r in rs),
                         " / ".join(f"{100 * r['other_cpu'] / r['wall'] / ncpu:.0f}%"
                                    f" ({100 * r['steal'] / r['wall'] / ncpu:.0f}%)" for r in rs)
                         + ("".join(f" UNDELIVERED {r['undelivered']}" for r in rs if r["undelivered"]))])
    for rate in args.latency_rates:
        for size in args.sizes:
            for t in targets:
                ls = lat[(t.name, size, rate)]
                lrows.append([f"{rate:,.0f}/s", f"{size} B", t.name, " / ".join(f"{x['p50']:.1f}" for x in ls),
                              " / ".join(f"{x['p99']:.1f}" for x in ls), " / ".join(f"{x['max']:.0f}" for x in ls),
                              " / ".join(f"{100 * x['cpu']:.0f}%" for x in ls),
                              " / ".join(str(x["errors"]) for x in ls)])
    return ([rows, ["size", "target", "records/s", "MB/s", "ratio to standalone", "broker CPU s/GB",
                    "broker minor faults per MB", "client CPU", "other load (of it steal)"]],
            [lrows, ["paced", "size", "target", "p50 ms", "p99 ms", "max ms", "broker CPU (of one core)", "errors"]],
            cluster_logs)


# --- 2. failover ----------------------------------------------------------------------
class AckClock:
    """An idempotent acks=all producer in its own thread, `rate` records/s to partition 0,
    noting (ack time, seq, offset, produce time) of every acknowledgement."""

    def __init__(self, bootstrap: str, topic: str, rate: float, client: dict, size: int = 100):
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, **FAILOVER_CLIENT, **client})
        self.topic, self.rate, self.size = topic, rate, size
        self.acks: list[tuple[float, int, int, float]] = []
        self.errors: list[str] = []
        self.sent = 0
        self._cursor = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        p, t0 = self.producer, time.monotonic()
        pad = b"." * (self.size - 16)
        while not self._stop.is_set():
            now = time.monotonic()
            while self.sent < int((now - t0) * self.rate) + 1:
                seq, produced = self.sent, time.monotonic()

                def delivered(err, msg, seq=seq, produced=produced):
                    if err is None:
                        self.acks.append((time.monotonic(), seq, msg.offset(), produced))
                    else:
                        self.errors.append(f"seq {seq}: {err}")
                p.produce(self.topic, seq.to_bytes(8, "big") + int(produced * 1e9).to_bytes(8, "big") + pad,
                          partition=0, on_delivery=delivered)
                self.sent += 1
            p.poll(0.0005)  # callbacks run here: poll often so an ack's timestamp is its arrival
        p.flush(120)

    def first_ack_produced_after(self, t0: float) -> float | None:
        """When the first record produced after t0 was acknowledged (acks come in produce order)."""
        acks = self.acks
        while self._cursor < len(acks):
            t_ack, _seq, _off, produced = acks[self._cursor]
            if produced > t0:
                return t_ack
            self._cursor += 1
        return None

    def max_gap(self, t_from: float, t_to: float) -> float:
        """Longest silence between acknowledgements over [t_from, t_to] (edges count)."""
        times = [t_from] + [a[0] for a in self.acks if t_from < a[0] < t_to] + [t_to]
        last_before = [a[0] for a in self.acks if a[0] <= t_from]
        if last_before:
            times[0] = last_before[-1]
        return max(b - a for a, b in zip(times, times[1:]))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)


def leading_since(broker: Broker, topic: str, epoch: int) -> float | None:
    """Wall-clock time the broker logged taking the leadership at ``epoch`` (its log's clock, ms)."""
    needle = f"{topic}-0: leading at epoch {epoch} "
    for line in broker.log_text().splitlines():
        if needle in line:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()
    return None


def trial(cluster: Cluster, topic: str, clock: AckClock, how: str, steady_s: float, events: list) -> dict:
    """One leader failure; back to a full ISR before returning."""
    time.sleep(steady_s)
    leader = cluster.leader_of(topic, 0)
    was_controller = cluster.controller() == leader
    t0, wall0 = time.monotonic(), time.time()
    events.append((t0, f"{how} of leader {leader}"))
    steady_gap = clock.max_gap(t0 - steady_s, t0)
    failure = []
    if how == "SIGKILL":
        cluster.kill(leader)
        stopper = None
    else:  # Broker.stop: SIGTERM, then insists on a clean exit; in a thread so we can watch meanwhile
        def stop():
            try:
                cluster.stop(leader)
            except BrokerError as exc:
                failure.append(str(exc))
        stopper = threading.Thread(target=stop)
        stopper.start()
    elected = recovered = exited = None
    state = None
    while time.monotonic() < t0 + 180:
        now = time.monotonic()
        if elected is None:
            state = cluster.state(topic, 0)
            if state.leader not in (-1, leader):
                elected = now - t0
        if recovered is None and (t := clock.first_ack_produced_after(t0)) is not None:
            recovered = t - t0
        if exited is None and (stopper is None or not stopper.is_alive()):
            exited = now - t0
        if elected is not None and recovered is not None and exited is not None:
            break
        time.sleep(0.01)
    time.sleep(1.0)  # acks keep coming after the old leader left: count the gaps there too
    gap = clock.max_gap(t0, time.monotonic())
    if stopper is not None:
        stopper.join(60)
    leading = None
    if elected is not None and state is not None and (
            since := leading_since(cluster.brokers[state.leader], topic, state.leader_epoch)):
        leading = since - wall0
    events.append((time.monotonic(), f"restart of broker {leader}"))
    cluster.start(leader)
    cluster.wait_in_sync(topic, 1)
    events.append((time.monotonic(), f"broker {leader} back in the ISR"))
    return {"how": how, "leader": leader, "controller": was_controller, "new_leader": state.leader if state else -1,
            "elected": elected, "leading": leading, "recovered": recovered, "gap": gap,
            "exited": exited if stopper else None, "steady_gap": steady_gap, "failure": failure}


def read_back(bootstrap: str, topic: str) -> list[int]:
    """Every seq in partition 0, from a fresh consumer (its group.id makes the cluster create
    __consumer_offsets: done after the trials)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-verify", "enable.auto.commit": False})
    seqs = []
    try:
        _low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=30)
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        position, deadline = 0, time.monotonic() + 120
        while position < high and time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    value, offset = m.value(), m.offset()
                    assert value is not None and offset is not None  # a record, not an error event
                    seqs.append(int.from_bytes(value[:8], "big"))
                    position = offset + 1
    finally:
        c.close()
    return seqs


def run_failover(zk, tmp: Path, name: str, extra: dict, plan: list[str], args):
    cluster = start_cluster(zk, tmp, name, {**args.cluster_set, **extra})
    topic = "failover"
    results, events, clock = [], [], None
    try:
        create_topic(cluster.bootstrap, topic, 1, 3)
        cluster.wait_in_sync(topic, 1)
        clock = AckClock(cluster.bootstrap, topic, args.failover_rate, args.failover_client)
        wait_for(lambda: len(clock.acks) >= args.failover_rate, 60, "the steady producer to get going")
        events.append((time.monotonic(), "steady producer running"))
        for i, how in enumerate(plan):
            print(f"{name}: trial {i + 1}/{len(plan)}, {how} of the leader ...", file=sys.stderr, flush=True)
            results.append(trial(cluster, topic, clock, how, 3.0, events))
            print(f"  {results[-1]}", file=sys.stderr, flush=True)
        time.sleep(3.0)
        clock.stop()
        seqs = read_back(cluster.bootstrap, topic)
        acked = {a[1] for a in clock.acks}
        check = {"sent": clock.sent, "acked": len(acked), "delivery errors": len(clock.errors),
                 "first errors": clock.errors[:3], "acked but not in the log": len(acked - set(seqs)),
                 "duplicates in the log": len(seqs) - len(set(seqs))}
        # every silence over 0.3 s in the whole run, placed by the last event before it ended
        times = [a[0] for a in clock.acks]
        long_gaps = []
        for a, b in zip(times, times[1:]):
            if b - a > 0.3:
                when, what = max((e for e in events if e[0] < b), default=(times[0], "start"))
                long_gaps.append(f"{b - a:.2f} s, starting {a - when:+.2f} s from the {what}")
        logs = [b.log_path for b in cluster.brokers.values()]
    finally:
        if clock is not None and clock._thread.is_alive():
            clock.stop()
        cluster.close()
    return results, check, long_gaps, logs


def log_troubles(paths: list[Path], limit: int = 15) -> list[str]:
    """ERROR lines and tracebacks the brokers logged (WARNINGs about dead peers are expected)."""
    found = []
    for path in paths:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        found += [f"{path.parent.name}/{path.name}: {line}" for line in lines
                  if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")]
    return found[:limit] + ([f"... {len(found) - limit} more"] if len(found) > limit else [])


def fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def tree_state() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--short", "--untracked-files=no", "hpbroker"], cwd=REPO,
                           capture_output=True, text=True).stdout.split()[1::2]
    return head.strip() + (f" with uncommitted changes to {', '.join(dirty)}" if dirty else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small volumes, one round, one trial each")
    ap.add_argument("--sizes", default="100,1024", help="record sizes in bytes (default 100,1024)")
    ap.add_argument("--mb", type=float, default=100, help="MB of record values per throughput phase (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every throughput/latency phase (default 3)")
    ap.add_argument("--latency-rates", default="100,1000", help="paced records/s for latency (default 100,1000)")
    ap.add_argument("--latency-seconds", type=float, default=10, help="measured seconds per latency phase")
    ap.add_argument("--trials", type=int, default=3, help="failures of each kind (default 3)")
    ap.add_argument("--failover-rate", type=float, default=1000, help="steady producer, records/s (default 1000)")
    ap.add_argument("--failover-client", action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka setting for the steady producer (repeatable)")
    ap.add_argument("--cluster-set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra setting for the cluster's brokers, for diagnosis (repeatable)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.rounds, args.latency_seconds, args.trials = 10, 1, 3, 1
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.latency_rates = [float(r) for r in args.latency_rates.split(",")]
    args.failover_client = dict(kv.split("=", 1) for kv in args.failover_client)
    args.cluster_set = dict(kv.split("=", 1) for kv in args.cluster_set)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: no broker left behind

    tree = tree_state()
    tmp = Path(tempfile.mkdtemp(prefix="hpbroker-cluster-e2e-"))
    page_cache = page_cache_state(str(tmp))  # see bench/memory_probe.py
    wake_ups = wake_up_state()  # see bench/wakeup_probe.py
    zk = ZooKeeperServer(tmp / "zookeeper")
    out, logs = [], []
    try:
        zk.start()
        if not args.skip_throughput:
            (rows, header), (lrows, lheader), plogs = run_throughput(args, tmp, zk)
            logs += plogs
            out.append(("throughput (rounds separated by /)", render(rows, header)))
            out.append(("latency, produce() to delivery callback (rounds separated by /)", render(lrows, lheader)))
        if not args.skip_failover:
            frows, checks = [], []
            runs = [("session-18000", {}, ["SIGKILL"] * args.trials + ["SIGTERM"] * args.trials),
                    ("session-6000", {"zookeeper.session.timeout.ms": "6000",
                                      "zookeeper.connection.timeout.ms": "6000"}, ["SIGKILL"] * args.trials)]
            for name, extra, plan in runs:
                results, check, long_gaps, flogs = run_failover(zk, tmp, name, extra, plan, args)
                logs += flogs
                checks.append(f"{name}: {check}")
                checks += [f"{name}: ack gap {g}" for g in long_gaps]
                for r in results:
                    frows.append([name, r["how"], f"{r['leader']}{' (controller)' if r['controller'] else ''}",
                                  r["new_leader"], fmt(r["elected"]), fmt(r["leading"]), fmt(r["recovered"]),
                                  fmt(r["gap"]), fmt(r["exited"]), fmt(r["steady_gap"]),
                                  "; ".join(r["failure"]) or "-"])
            out.append(("failover, seconds from the signal", render(frows, [
                "run", "signal", "old leader", "new leader", "new leader in ZooKeeper", "new leader logs leading",
                "first ack of a record produced after the signal", "longest ack gap", "old leader exited",
                "longest ack gap in the 3 s before", "failure"])))
            out.append(("failover checks and every ack gap over 0.3 s",
                        ("\n".join(checks), "\n".join(f"* {c}" for c in checks))))
    finally:
        zk.stop()
        troubles = log_troubles(logs)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}", file=sys.stderr)

    info = {**machine_info(), "page cache, before": page_cache, "wake-ups, before": wake_ups}
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"tree: {tree}")
    print("command: .venv/bin/python bench/cluster_e2e.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    for title, (text, md) in out:
        print(f"\n{title}\n\n{text}\n\nmarkdown:\n\n{md}")
    print("\nbroker ERROR lines / tracebacks: " + ("none" if not troubles else "\n" + "\n".join(troubles)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
