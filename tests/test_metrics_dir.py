"""A SIGKILLed broker's metric samples directory is swept by the next broker."""

import os
import subprocess

from hpbroker.server import metrics_dir


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_sweep_removes_only_directories_of_brokers_that_are_gone(tmp_path):
    gone = tmp_path / f"{metrics_dir.PREFIX}{_dead_pid()}-abc"
    alive = tmp_path / f"{metrics_dir.PREFIX}{os.getpid()}-def"
    unrelated = tmp_path / "hpbroker-metrics-not-a-pid"
    for path in (gone, alive, unrelated):
        path.mkdir()
        (path / "counter_1.db").write_bytes(b"\0" * 16)

    removed = metrics_dir.sweep_stale(str(tmp_path))

    assert removed == [str(gone)]
    assert not gone.exists()
    assert alive.exists() and unrelated.exists()


def test_prepare_names_the_directory_after_the_acceptor(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setenv(metrics_dir.ENV, "unset after the test")  # recorded: whatever prepare() sets is undone
    monkeypatch.delenv(metrics_dir.ENV)
    path = metrics_dir.prepare()
    try:
        assert os.path.basename(path).startswith(f"{metrics_dir.PREFIX}{os.getpid()}-")
        assert os.environ[metrics_dir.ENV] == path
    finally:
        metrics_dir.cleanup(path)
