"""End-to-end benchmark: a real hpbroker, confluent-kafka as the load generator.

    .venv/bin/python bench/e2e.py [--records N] [--sizes 100,1024]

Measures, per record size: produce throughput (acks=1, batching tuned for
throughput), consume throughput (Fetch served with sendfile), and the broker's
CPU seconds per GB from /proc (acceptor + workers, utime+stime, before/after).
Then produce-to-consume latency percentiles at a paced rate (default 50 MB/s of
1 KiB records), with the consumer in its own process so the two Python loops
do not share a GIL.  Prints a table and writes the same as a markdown snippet
for bench/RESULTS.md.
"""

import argparse
import multiprocessing
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import confluent_kafka as ck  # noqa: E402

from harness.broker import Broker  # noqa: E402

PARTITIONS = 2  # one per worker on this machine: each worker appends to its own partition
MB = 1e6
GB = 1e9


# --- machine ---------------------------------------------------------------------------
def machine_info() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "memory": f"{mem_gib:.0f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent-kafka": f"{_version(ck.version())} (librdkafka {_version(ck.libversion())})",
    }


def _version(v) -> str:
    return v[0] if isinstance(v, tuple) else str(v)  # (text, int) in some releases, text in others


def client_cpu() -> float:
    """This process's CPU seconds, librdkafka's threads included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_ticks() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def machine_busy() -> float:
    """CPU seconds every core spent not idle, from /proc/stat (to show other load)."""
    ticks = _cpu_ticks()
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine_steal() -> float:
    """CPU seconds the hypervisor ran something else while this machine's cores
    had work (part of machine_busy)."""
    return _cpu_ticks()[7] / os.sysconf("SC_CLK_TCK")


class Meter:
    """CPU of the broker (user/sys), of this process, and of everything else, over one phase."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.b0, self.c0, self.m0, self.t0 = broker.cpu_times(), client_cpu(), machine_busy(), time.perf_counter()

    def stop(self) -> dict:
        b1, c1, m1 = self.broker.cpu_times(), client_cpu(), machine_busy()
        wall = time.perf_counter() - self.t0
        user, system = b1[0] - self.b0[0], b1[1] - self.b0[1]
        client = c1 - self.c0
        return {"wall": wall, "broker_cpu": user + system, "broker_user": user, "broker_sys": system,
                "client_cpu": client, "other_cpu": max(0.0, (m1 - self.m0) - user - system - client)}


def raw_write_baseline(directory: Path, nbytes: int) -> dict:
    """The kernel's own cost of putting nbytes into the page cache (1 MiB write()s),
    a floor under any broker's CPU per GB on this machine."""
    chunk = os.urandom(2**20)
    path = directory / "raw-write-baseline.tmp"
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(nbytes // len(chunk)):
            os.write(fd, chunk)
    finally:
        os.close(fd)
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    path.unlink()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"bytes": nbytes, "wall": wall, "cpu": cpu}


def log_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for d in data_dir.glob(f"{topic}-*") for f in d.glob("*.log"))


# --- produce ---------------------------------------------------------------------------
def produce(broker: Broker, topic: str, n: int, size: int) -> dict:
    p = ck.Producer({
        "bootstrap.servers": broker.bootstrap,
        "acks": 1,
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 262_144,  # bounded: reused memory is cheaper than first-touch on these VMs
        "compression.type": "none",
        "message.max.bytes": 2_000_000,
    })
    failed = []
    p.produce(topic, b"warm-up", partition=0)  # metadata and connections before the clock starts
    p.flush(30)
    payload = os.urandom(size)  # incompressible, not that it matters with compression off
    produce_one, poll = p.produce, p.poll
    meter = Meter(broker)
    for i in range(n):
        while True:
            try:
                produce_one(topic, payload, partition=i & 1)
                break
            except BufferError:  # the bounded local queue is full: wait for deliveries
                poll(0.005)
        if i & 0xFFFF == 0:
            poll(0)
    left = p.flush(120)
    m = meter.stop()
    if left:
        failed.append(f"{left} undelivered")
    return {**m, "records": n, "rps": n / m["wall"], "mbps": n * size / m["wall"] / MB, "bytes": n * size,
            "failed": failed}


# --- consume ---------------------------------------------------------------------------
def consume(broker: Broker, topic: str, n: int) -> dict:
    """Read the first n records back from offset 0 of both partitions."""
    c = ck.Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "bench",
        "enable.auto.commit": False,
        "fetch.max.bytes": 64 * 2**20,
        "max.partition.fetch.bytes": 16 * 2**20,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": 1_000_000,
        "queued.min.messages": 1_000_000,
        "receive.message.max.bytes": 100 * 2**20,
    })
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = nbytes = 0
    deadline = time.monotonic() + 300
    meter = Meter(broker)
    while got < n and time.monotonic() < deadline:
        for m in c.consume(min(100_000, n - got), 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m)
    m = meter.stop()
    c.close()
    return {**m, "records": got, "rps": got / m["wall"], "mbps": nbytes / m["wall"] / MB, "bytes": nbytes}


# --- latency ---------------------------------------------------------------------------
def _latency_consumer(bootstrap, topic, expected, ready, out) -> None:
    """Child process: read everything from offset 0, record now - sent per record."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lat", "enable.auto.commit": False,
                     "fetch.min.bytes": 1, "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 0})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    c.consume(1, 0.5)  # connected and fetching before the producer starts
    ready.set()
    lat = []
    deadline = time.monotonic() + 120
    while len(lat) < expected and time.monotonic() < deadline:
        # consume(n, t) waits for n records or t, which would add up to t of latency:
        # block for one record, then take whatever else is already queued
        first = c.poll(0.2)
        for m in ([first] if first is not None else []) + c.consume(10_000, 0):
            if m.error() is None:
                now = time.monotonic_ns()
                v = m.value()
                assert v is not None  # a record, not an error event
                lat.append((int.from_bytes(v[:8], "big"), now - int.from_bytes(v[8:16], "big")))
    c.close()
    out.send(lat)


def latency(broker: Broker, topic: str, rate_mbps: float, seconds: float, size: int, warmup: float) -> dict:
    per_s = rate_mbps * MB / size
    total = int(per_s * (seconds + warmup))
    ctx = multiprocessing.get_context("spawn")  # librdkafka threads do not survive fork
    ready, (recv_end, send_end) = ctx.Event(), ctx.Pipe(duplex=False)
    child = ctx.Process(target=_latency_consumer, args=(broker.bootstrap, topic, total, ready, send_end))
    child.start()
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 1,
                     "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    p.produce(topic, b"\0" * 16, partition=0)  # warm the connection; read as seq 0 with a bogus stamp
    p.flush(30)
    if not ready.wait(60):
        raise RuntimeError("latency consumer did not start")
    filler = b"x" * (size - 16)
    acked = []  # (seq, ns from produce() to the broker's ack): splits latency into produce and fetch

    def on_delivery(err, msg):
        if err is None:
            v = msg.value()
            acked.append((int.from_bytes(v[:8], "big"), time.monotonic_ns() - int.from_bytes(v[8:16], "big")))

    sent, t0 = 1, time.monotonic()
    produce_one, poll = p.produce, p.poll
    while sent < total:
        # pace in small slices: produce what the schedule owes, then yield briefly
        due = min(total, int((time.monotonic() - t0) * per_s) + 1)
        while sent < due:
            value = sent.to_bytes(8, "big") + time.monotonic_ns().to_bytes(8, "big") + filler
            try:
                produce_one(topic, value, partition=sent & 1, on_delivery=on_delivery)
            except BufferError:
                poll(0.001)
                continue
            sent += 1
        poll(0)
        time.sleep(0.0002)
    elapsed = time.monotonic() - t0
    p.flush(60)
    lat = recv_end.recv()
    child.join(30)
    achieved = (sent - 1) * size / elapsed / MB
    skip = int(per_s * warmup)
    values = sorted(ns for seq, ns in lat if seq > skip)
    acks = sorted(ns for seq, ns in acked if seq > skip)
    if not values or not acks:
        raise RuntimeError("no latency samples")

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))] / 1e6

    return {"target_mbps": rate_mbps, "achieved_mbps": achieved, "samples": len(values), "received": len(lat),
            "sent": sent, "p50": pct(values, 0.50), "p99": pct(values, 0.99), "p999": pct(values, 0.999),
            "max": values[-1] / 1e6, "ack_p50": pct(acks, 0.50), "ack_p99": pct(acks, 0.99)}


# --- report ----------------------------------------------------------------------------
def render(rows: list[list[str]], header: list[str]) -> tuple[str, str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    text = "  ".join(h.ljust(w) for h, w in zip(header, widths)) + "\n"
    text += "  ".join("-" * w for w in widths) + "\n"
    text += "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in rows)
    md = "| " + " | ".join(header) + " |\n| " + " | ".join("---" for _ in header) + " |\n"
    md += "\n".join("| " + " | ".join(str(x) for x in r) + " |" for r in rows)
    return text, md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records per size (default 1000000)")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes (default 100,1024)")
    ap.add_argument("--latency-rate", type=float, default=50.0, help="paced produce rate, MB/s (default 50)")
    ap.add_argument("--latency-seconds", type=float, default=5.0, help="measured seconds (after 1 s warm-up)")
    ap.add_argument("--latency-size", type=int, default=1024, help="record size for the latency run")
    ap.add_argument("--data-dir", help="where the broker keeps its log (default: a fresh temp dir, removed)")
    ap.add_argument("--markdown", default=str(REPO / "bench" / "e2e_results.md"), help="snippet to write")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker setting (repeatable)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    tmp = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="hpbroker-e2e-"))
    overrides = {"num.partitions": str(PARTITIONS), **dict(kv.split("=", 1) for kv in args.set)}
    broker = Broker(tmp / "data", tmp / "broker.log", overrides)
    info = machine_info()
    ncpu = info["nproc"]
    rows, notes = [], []
    broker.start()
    try:
        for size in sizes:
            topic = f"e2e-{size}"
            print(f"produce {args.records} x {size} B ...", file=sys.stderr, flush=True)
            pr = produce(broker, topic, args.records, size)
            on_disk = log_bytes(broker.data_dir, topic)
            print(f"consume {args.records} x {size} B ...", file=sys.stderr, flush=True)
            co = consume(broker, topic, args.records)
            for phase, r in (("produce", pr), ("consume", co)):
                share = lambda cpu: f"{100 * cpu / r['wall'] / ncpu:.0f}%"  # noqa: E731  (of all cores)
                rows.append([f"{phase} {size} B", f"{r['rps']:,.0f}", f"{r['mbps']:,.1f}",
                             f"{r['broker_cpu']:.2f} s = {share(r['broker_cpu'])} "
                             f"(user {r['broker_user']:.2f} / sys {r['broker_sys']:.2f})",
                             f"{r['broker_cpu'] / (r['bytes'] / GB):.2f}" if r["bytes"] else "-",
                             share(r["client_cpu"]), share(r["other_cpu"])])
            notes.append(f"{size} B: {pr['records']:,} records in {pr['wall']:.2f} s; {on_disk / MB:,.1f} MB of "
                         f"segments on disk; consumed {co['records']:,} in {co['wall']:.2f} s"
                         + (f"; PRODUCE FAILURES: {pr['failed']}" if pr["failed"] else ""))
        print("raw write() baseline ...", file=sys.stderr, flush=True)
        raw = raw_write_baseline(tmp, 2**30)
        notes.append(f"kernel floor: write() of 1 GiB into the page cache in 1 MiB calls on the same file system "
                     f"took {raw['wall']:.2f} s and {raw['cpu'] / (raw['bytes'] / GB):.2f} CPU s/GB "
                     f"({raw['bytes'] / raw['wall'] / MB:,.0f} MB/s)")
        print("latency ...", file=sys.stderr, flush=True)
        la = latency(broker, "e2e-latency", args.latency_rate, args.latency_seconds, args.latency_size, 1.0)
    finally:
        broker.stop()
    if not args.data_dir:
        shutil.rmtree(tmp, ignore_errors=True)

    header = ["phase", "records/s", "MB/s", "broker CPU", "broker CPU s/GB", "client CPU", "other load"]
    table, md_table = render(rows, header)
    reached = "target reached" if la["achieved_mbps"] >= 0.95 * la["target_mbps"] else "highest reached"
    lat_line = (f"produce-to-consume latency, {args.latency_size} B records paced at {la['target_mbps']:.0f} MB/s "
                f"(achieved {la['achieved_mbps']:.1f} MB/s, {reached}; {la['samples']:,} samples after 1 s warm-up): "
                f"p50 {la['p50']:.2f} ms, p99 {la['p99']:.2f} ms, p99.9 {la['p999']:.2f} ms, max {la['max']:.2f} ms; "
                f"of which produce() to ack: p50 {la['ack_p50']:.2f} ms, p99 {la['ack_p99']:.2f} ms")
    command = ".venv/bin/python bench/e2e.py " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = ", ".join(f"{k} {v}" for k, v in info.items())
    print(f"\nmachine: {machine}\n\n{table}\n\n{lat_line}\n" + "\n".join(notes))

    md = (f"## End to end: broker + confluent-kafka ({time.strftime('%Y-%m-%d')})\n\n"
          f"Machine: {machine}.\n\nCommand:\n\n```sh\n{command.strip()}\n```\n\n"
          f"Broker: {broker.num_workers} workers, topics with {PARTITIONS} partitions, defaults otherwise "
          f"(no fsync per message); produce with acks=1, linger.ms=20, batch.size=1 MB, no compression; "
          f"the load generator runs on the same {ncpu} cores as the broker.  "
          f"MB/s counts record values; broker CPU is utime+stime of the acceptor and workers from /proc; "
          f"CPU shares are of all {ncpu} cores over the phase; \"other load\" is CPU used by every other "
          f"process on the machine meanwhile (from /proc/stat), which makes a run noisy when it is not ~0.\n\n"
          f"{md_table}\n\n* {lat_line}\n" + "".join(f"* {n}\n" for n in notes))
    Path(args.markdown).write_text(md)
    print(f"\nmarkdown written to {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
