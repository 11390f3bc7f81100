"""What rolling and deleting segments costs a busy broker: throughput, and
the latency of a light producer beside the load, with segments that never
roll, with segments that roll every ``--segment-mib``, and with retention
deleting them as fast as they roll, in one run.

    .venv/bin/python bench/roll_stall.py [--seconds 8] [--segment-mib 256] [--rounds 2]

Each phase starts a fresh standalone broker (two workers) and drives it
with librdkafka's C ``rdkafka_performance``: 1 KiB records into the two
partitions of one topic, acks=1, linger.ms=5, as fast as it goes.  Beside
it a confluent-kafka producer sends 5 B records (linger.ms=0, acks=1),
alternating partitions, one after each wait of up to 5 ms for delivery
reports (400-600 a second here); their delivery latency (librdkafka's own,
produce() to the delivery report) is what a light client meets while the
heavy one runs.  A connection's requests are handled one at a time, in
order, so beside this load the probe's connection runs close to
saturation: its p99 mostly shows its own queue, its p50 the broker.
Throughput is the records the two partitions' log end offsets grew by over
the window, times 1 KiB (retention deletes files, so their sizes would not
do).

A roll asks for the closed segment to be fsynced; the first two phases
differ only in ``log.segment.bytes``, so the difference between their rows
is what those flushes cost the request path.  The third keeps
``log.retention.bytes`` at two segments, checked every second, with a
delete delay of one second: each roll then also unlinks an old segment
(still in the page cache), which is what a full disk's retention does all
day.
"""

from __future__ import annotations

import argparse
import shutil
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

from bench import tools  # noqa: E402
from bench.cluster_e2e import pct  # noqa: E402
from harness.broker import Broker  # noqa: E402

TOPIC = "rolls"
NEVER = 2**31 - 1  # the largest log.segment.bytes: no roll within a phase


class Probe(threading.Thread):
    """One small record every ``period`` seconds; delivery latencies in ``latencies``."""

    def __init__(self, bootstrap: str, period: float = 0.005):
        super().__init__(daemon=True)
        self.bootstrap, self.period = bootstrap, period
        self.latencies: list[float] = []
        self.errors = 0
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err:
            self.errors += 1
        else:
            self.latencies.append(msg.latency())

    def run(self) -> None:
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "acks": 1, "linger.ms": 0})
        sent = 0
        while not self.stopping.is_set():
            producer.produce(TOPIC, b"probe", partition=sent % 2, on_delivery=self._delivered)
            sent += 1
            producer.poll(self.period)
        producer.flush(30)


def _log_end(consumer: ck.Consumer) -> int:
    """Both partitions' log end offsets, summed: the records appended so far."""
    return sum(consumer.get_watermark_offsets(ck.TopicPartition(TOPIC, p), timeout=30)[1] for p in (0, 1))


def phase(settings: dict[str, str], seconds: float, work: Path) -> dict:
    data_dir = work / f"data-{time.monotonic_ns()}"
    broker = Broker(data_dir, overrides={"num.workers": "2", **settings})
    broker.start()
    load = None
    probe = Probe(broker.bootstrap)
    watermarks = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "roll-stall"})
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        probe.start()
        load = subprocess.Popen([str(tools.rdkafka_performance()), "-P", "-t", TOPIC, "-s", "1024", "-a", "1",
                                 "-b", broker.bootstrap, "-c", "1000000000", "-X", "linger.ms=5"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # the load up to speed before the window opens
        probe.latencies.clear()
        before, started = _log_end(watermarks), time.monotonic()
        time.sleep(seconds)
        grown, elapsed = (_log_end(watermarks) - before) * 1024, time.monotonic() - started
        latencies = sorted(probe.latencies)
    finally:
        probe.stopping.set()
        if load is not None:
            load.terminate()
            load.wait()
        probe.join(60)
        watermarks.close()
        broker.stop()
    broker_log = broker.log_path.read_text(errors="replace")
    rolls, deletes = broker_log.count("rolled to segment"), broker_log.count("deleting segment")
    shutil.rmtree(data_dir, ignore_errors=True)
    # milliseconds; none at all (every probe record failed) reads nan
    spread = ({"p50": pct(latencies, 0.5) * 1e3, "p99": pct(latencies, 0.99) * 1e3, "max": latencies[-1] * 1e3}
              if latencies else dict.fromkeys(("p50", "p99", "max"), float("nan")))
    return {"mibps": grown / elapsed / 2**20, "rolls": rolls, "deletes": deletes, "n": len(latencies),
            "errors": probe.errors, **spread}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured window of each phase")
    parser.add_argument("--segment-mib", type=int, default=256, help="log.segment.bytes of the rolling phases, MiB")
    parser.add_argument("--rounds", type=int, default=2, help="both phases this many times, alternating")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="roll-stall-"))
    segment = args.segment_mib << 20
    phases = [
        ("never", {"log.segment.bytes": str(NEVER)}),
        (f"every {args.segment_mib} MiB", {"log.segment.bytes": str(segment)}),
        (f"every {args.segment_mib} MiB, retention deletes them", {
            "log.segment.bytes": str(segment), "log.retention.bytes": str(2 * segment),
            "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "1000"}),
    ]
    rows = []
    try:
        for round_ in range(1, args.rounds + 1):
            for label, settings in phases:
                print(f"round {round_}: segments roll {label} ...", file=sys.stderr, flush=True)
                rows.append((round_, label, phase(settings, args.seconds, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tree = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    print(f"tree {tree}; {args.seconds:g} s windows; probe: a 5 B record after each wait of up to 5 ms, "
          "beside 1 KiB records at full speed\n")
    print("| round | segments roll | MiB/s | rolls | deletes | probe p50 ms | probe p99 ms | probe max ms "
          "| probe records |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for round_, label, r in rows:
        errors = f" ({r['errors']} failed)" if r["errors"] else ""
        print(f"| {round_} | {label} | {r['mibps']:.0f} | {r['rolls']} | {r['deletes']} | {r['p50']:.1f} "
              f"| {r['p99']:.1f} "
              f"| {r['max']:.0f} | {r['n']}{errors} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
