"""``hpbroker spark-load``: killed at each step, the rerun loads every record exactly once."""

import argparse
import os
import signal
import subprocess
import sys

import pytest

from hpbroker.cli import spark_load
from tests.spark.conftest import ROOT
from tests.spark.segments import PartitionWriter


def args_for(log_dir, out, **extra):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    spark_load.add_parser(sub)
    argv = ["spark-load", "--data-dir", log_dir, "--topic", "t", "--out", out]
    for k, v in extra.items():
        argv += [f"--{k}", v]
    return parser.parse_args(argv)


def loaded(spark, out):
    rows = spark.read.parquet(out).select("partition", "offset").collect()
    return sorted((r.partition, r.offset) for r in rows)


class Killed(Exception):
    pass


@pytest.mark.parametrize("step", ["after-write", "after-rename"])
def test_rerun_after_a_crash_loads_exactly_once(spark, log_dir, tmp_path, monkeypatch, step):
    writers = [PartitionWriter(log_dir, "t", p) for p in range(2)]
    for w in writers:
        w.append_values(30)
    out = str(tmp_path / "out")
    assert spark_load.run(args_for(log_dir, out)) == 0
    for w in writers:
        w.append_values(12)

    def crash(at):
        if at == step:
            raise Killed(at)
    monkeypatch.setattr(spark_load, "crash_point", crash)
    with pytest.raises(Killed):
        spark_load.run(args_for(log_dir, out))
    monkeypatch.undo()
    assert spark_load.run(args_for(log_dir, out)) == 0
    assert loaded(spark, out) == [(p, o) for p in range(2) for o in range(42)]
    state = spark_load.read_state(out, "t")
    assert state["offsets"] == {"t": {"0": 42, "1": 42}} and state["next_load"] == 2
    assert spark_load.run(args_for(log_dir, out)) == 0  # nothing new: no empty load
    assert sorted(os.listdir(out)) == ["_hpbroker_load.json", "load=0", "load=1"]


def test_sigkill_of_the_real_process_then_rerun(spark, log_dir, tmp_path):
    w = PartitionWriter(log_dir, "t", 0)
    w.append_values(50)
    out = str(tmp_path / "out")
    env = dict(os.environ, HPBROKER_SPARK_LOAD_KILL_AT="after-rename", PYTHONPATH=ROOT, SPARK_LOCAL_IP="127.0.0.1")
    code = ("import argparse, sys; from hpbroker.cli import spark_load; p = argparse.ArgumentParser(); "
            "spark_load.add_parser(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); sys.exit(a.run(a))")
    proc = subprocess.run([sys.executable, "-c", code, "spark-load", "--data-dir", log_dir, "--topic", "t",
                           "--out", out, "--master", "local[1]"], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert "spark-load: load 0" in proc.stderr
    assert os.path.isdir(os.path.join(out, "load=0"))  # written, renamed, not committed
    w.append_values(5)
    assert spark_load.run(args_for(log_dir, out)) == 0
    assert loaded(spark, out) == [(0, o) for o in range(55)]
