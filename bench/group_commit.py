"""What fsyncing every message costs: ``log.flush.interval.messages=1`` under
many small producers, beside the same fsync done by a plain loop.

    .venv/bin/python bench/group_commit.py [--conns 10 50] [--seconds 6] [--markdown FILE]

For each number of connections a fresh standalone broker (two workers, every
topic's messages fsynced before their answer) takes librdkafka's C
``rdkafka_performance`` producers, one connection each, each sending 100 B
records one per request (``linger.ms=0``, ``batch.num.messages=1``, one
request in flight), acks=1, to the two partitions of one topic (a connection
keeps to one partition).  Counted as ``bench/request_cost.py`` counts:
requests from the clients' own statistics inside a steady window, broker CPU
from /proc over the same window.  The broker's fsyncs per Produce request
come from its /metrics over the whole phase: below 1 is the group commit at
work, the produces of a turn of a worker's loop sharing one fsync per
partition.

The floor is one thread that ``write()``s 100 B into a file on the same file
system and ``fsync()``s it, over and over: what a broker that fsyncs each
request on its own could do at best, per core.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import tools  # noqa: E402
from bench.e2e import machine_info, render  # noqa: E402
from bench.request_cost import COUNTERS_LAG_S, PARTITIONS, REQ_TOPIC, Settings, produce_requests, tree_state  # noqa: E402
from bench.targets import Hpbroker  # noqa: E402

_FSYNCS = re.compile(r"^hpbroker_fsync_seconds_count (\S+)$", re.M)


def fsyncs(target: Hpbroker) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{target.metrics_port}/metrics", timeout=10) as r:
        found = _FSYNCS.search(r.read().decode())
    return float(found.group(1)) if found else 0.0


def broker_phase(root: Path, perf: Path, conns: int, s: Settings) -> dict:
    (root / f"broker-{conns}").mkdir()
    target = Hpbroker(root / f"broker-{conns}")
    target.broker.overrides["log.flush.interval.messages"] = "1"
    target.start()
    try:
        target.create_topic(REQ_TOPIC, PARTITIONS)
        before = (fsyncs(target), target.request_counts().get("Produce", 0.0))
        r = produce_requests(target, perf, root / "clients", conns, s)
        time.sleep(COUNTERS_LAG_S)  # the counters reach the metric files once a second
        after = (fsyncs(target), target.request_counts().get("Produce", 0.0))
    finally:
        target.stop()
    produced = after[1] - before[1]
    return {**r, "fsyncs_per_request": (after[0] - before[0]) / produced if produced else float("nan")}


def fsync_floor(directory: Path, seconds: float) -> dict:
    """write(100 B) + fsync() in a loop: operations a second, CPU µs each."""
    path = directory / "floor.log"
    record = b"r" * 100
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        started, ops = time.monotonic(), 0
        while time.monotonic() - started < seconds:
            os.write(fd, record)
            os.fsync(fd)
            ops += 1
        wall = time.monotonic() - started
        ended = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.close(fd)
        path.unlink()
    cpu = (ended.ru_utime - usage.ru_utime) + (ended.ru_stime - usage.ru_stime)
    return {"rps": ops / wall, "us": cpu / ops * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--conns", type=int, nargs="+", default=[10, 50], help="producer connections (default 10 50)")
    ap.add_argument("--seconds", type=float, default=6.0, help="measured window per phase (default 6)")
    ap.add_argument("--markdown", help="also write the report as a markdown snippet to this file")
    args = ap.parse_args(argv)
    s = Settings(window=args.seconds, warmup=2.0, idle=0.0, levels=tuple(args.conns), acks_all_conns=0,
                 fetch_conns=0, fetch_wait_ms=0, lo_conns=0, nbytes=0)
    perf = tools.rdkafka_performance()
    info = {**machine_info(), "tree": tree_state()}
    with tempfile.TemporaryDirectory(prefix="hpbroker-group-commit-") as scratch:
        root = Path(scratch)
        rows = []
        for conns in args.conns:
            print(f"{conns} producer connections ...", file=sys.stderr, flush=True)
            r = broker_phase(root, perf, conns, s)
            rows.append([f"hpbroker, {conns} connections", f"{r['rps']:,.0f}", f"{r['us']:,.1f}",
                         f"{r['fsyncs_per_request']:.2f}"])
        floor = fsync_floor(root, args.seconds)
        rows.append(["floor: write() + fsync() of 100 B, one thread", f"{floor['rps']:,.0f}", f"{floor['us']:,.1f}",
                     "1.00"])
    header = ["log.flush.interval.messages=1, 100 B per request, acks=1", "requests/s", "CPU µs/request",
              "fsyncs/request"]
    text, md = render(rows, header)
    machine = ", ".join(f"{k} {v}" for k, v in info.items())
    command = "    .venv/bin/python bench/group_commit.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"Machine: {machine}\n\n{text}\n\n{command}")
    if args.markdown:
        Path(args.markdown).write_text(f"Machine: {machine}\n\n```sh\n{command.strip()}\n```\n\n{md}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
