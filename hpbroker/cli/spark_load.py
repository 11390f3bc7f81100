"""``hpbroker spark-load``: an exactly-once incremental load of a topic into Parquet.

    hpbroker spark-load --data-dir /var/lib/hpbroker/data --topic events --out /lake/events

Each run loads the records written since the last run into a new directory
``<out>/load=<n>/`` (Spark reads ``<out>`` as one table with a ``load``
partition column) and records what it loaded in ``<out>/_hpbroker_load.json``::

    {"version": 1, "topic": "events", "next_load": 3,
     "offsets": {"events": {"0": 1200, "1": 1187}},   <- next offset per partition
     "loads": [{"load": 2, "from": {...}, "to": {...}, "records": 812}, ...]}

The state file is the commit point, replaced atomically (temp file, fsync,
rename, directory fsync).  One run:

1. reads the state; removes ``load=<m>`` for every ``m >= next_load`` and the
   staging directory: leftovers of a run that died before its commit;
2. fixes the range: from the recorded offsets (earliest for a new partition)
   to what is readable now (see ``hpbroker.spark.plan``);
3. lets Spark write the range to ``<out>/_staging/load=<n>``, then renames it
   to ``<out>/load=<n>`` (one rename, atomic);
4. commits the new offsets and ``next_load = n + 1``.

A kill anywhere before 4 leaves the old state, and step 1 of the rerun drops
what the dead run wrote; after 4 the load is complete.  So a rerun neither
loses nor duplicates a record.  Readers that list ``<out>`` between 3 and 4
of a run that then dies see its directory until the rerun removes it.

Progress (stages and tasks) is printed to stderr while Spark runs.
"""

import json
import os
import shutil
import signal
import sys
import threading
import time

STATE_FILE = "_hpbroker_load.json"
STAGING_DIR = "_staging"
STATE_VERSION = 1


def add_parser(sub) -> None:
    parser = sub.add_parser("spark-load", help="append new records of a topic to Parquet, exactly once, with Spark")
    parser.add_argument("--data-dir", required=True, help="the broker's log directory (comma-separated for several)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="output directory (Parquet, one load=<n> directory per run)")
    parser.add_argument("--master", default=None, help="Spark master (default: an existing session, or local[*])")
    parser.add_argument("--isolation", default="read_uncommitted", choices=("read_uncommitted", "read_committed"))
    parser.add_argument("--compression", default="snappy", help="Parquet compression codec")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(run=run)


def crash_point(step: str) -> None:
    """Test hook: ``HPBROKER_SPARK_LOAD_KILL_AT=<step>`` kills this process there with SIGKILL."""
    if os.environ.get("HPBROKER_SPARK_LOAD_KILL_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def read_state(out: str, topic: str) -> dict:
    path = os.path.join(out, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return {"version": STATE_VERSION, "topic": topic, "next_load": 0, "offsets": {}, "loads": []}
    if state.get("version") != STATE_VERSION or state.get("topic") != topic:
        raise SystemExit(f"hpbroker spark-load: {path} belongs to topic {state.get('topic')!r} "
                         f"(version {state.get('version')}), not {topic!r}")
    return state


def write_state(out: str, state: dict) -> None:
    path = os.path.join(out, STATE_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_uncommitted(out: str, next_load: int, say) -> None:
    for name in os.listdir(out):
        uncommitted = name.startswith("load=") and name[5:].isdigit() and int(name[5:]) >= next_load
        if uncommitted or name == STAGING_DIR:
            say(f"removing {name}, left by a run that did not commit")
            shutil.rmtree(os.path.join(out, name))


class Progress:
    """Polls Spark's status tracker and prints one line per change of the running stages."""

    def __init__(self, spark, say, interval: float = 0.5):
        self._tracker = spark.sparkContext.statusTracker()
        self._say, self._interval = say, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _loop(self):
        last = None
        while not self._stop.wait(self._interval):
            parts = []
            for stage_id in sorted(self._tracker.getActiveStageIds()):
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                                 f" ({info.numActiveTasks} running)")
            line = "; ".join(parts)
            if line and line != last:
                self._say(line)
                last = line


def plan_range(args, state: dict):
    from hpbroker.spark import plan
    from hpbroker.spark.options import Options
    opts = Options.parse({"path": args.data_dir, "subscribe": args.topic, "isolation": args.isolation}, streaming=False)
    infos = plan.describe(opts)
    done = state["offsets"].get(args.topic, {})
    start = {str(p): int(done.get(str(p), info.earliest)) for (_, p), info in sorted(infos.items())}
    end = {str(p): max(info.latest, start[str(p)]) for (_, p), info in sorted(infos.items())}
    return start, end


def run(args) -> int:
    say = (lambda _msg: None) if args.quiet else (lambda msg: print(f"spark-load: {msg}", file=sys.stderr, flush=True))
    try:
        from pyspark.sql import SparkSession

        from hpbroker.spark import register
    except ImportError as exc:
        print(f"hpbroker spark-load: needs PySpark and pyarrow (pip install pyspark pyarrow) and a Java runtime: {exc}",
              file=sys.stderr)
        return 1

    os.makedirs(args.out, exist_ok=True)
    state = read_state(args.out, args.topic)
    remove_uncommitted(args.out, state["next_load"], say)
    start, end = plan_range(args, state)
    expected = sum(end[p] - start[p] for p in end)
    if expected == 0:
        say(f"nothing new in {args.topic} (offsets {end})")
        return 0
    n = state["next_load"]
    say(f"load {n}: {args.topic} offsets {start} -> {end} (up to {expected} records)")

    created = SparkSession.getActiveSession() is None
    builder = SparkSession.builder.appName(f"hpbroker spark-load {args.topic}")
    if args.master:
        builder = builder.master(args.master)
    elif created:
        builder = builder.master("local[*]").config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    try:
        register(spark)
        df = (spark.read.format("hpbroker").option("subscribe", args.topic).option("isolation", args.isolation)
              .option("startingOffsets", json.dumps({args.topic: start}))
              .option("endingOffsets", json.dumps({args.topic: end})).load(args.data_dir))
        staging = os.path.join(args.out, STAGING_DIR, f"load={n}")
        started = time.monotonic()
        with Progress(spark, say):
            df.write.option("compression", args.compression).parquet(staging)
        crash_point("after-write")
        records = spark.read.parquet(staging).count()
        os.rename(staging, os.path.join(args.out, f"load={n}"))
        shutil.rmtree(os.path.join(args.out, STAGING_DIR), ignore_errors=True)
        crash_point("after-rename")
        offsets = dict(state["offsets"])
        offsets[args.topic] = {**offsets.get(args.topic, {}), **end}
        state = {**state, "next_load": n + 1, "offsets": offsets,
                 "loads": state["loads"] + [{"load": n, "from": start, "to": end, "records": records}]}
        write_state(args.out, state)
        crash_point("after-commit")
        say(f"load {n} committed: {records} records in {time.monotonic() - started:.1f}s -> {args.out}/load={n}")
        return 0
    finally:
        if created:
            spark.stop()
