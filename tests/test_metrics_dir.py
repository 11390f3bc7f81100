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


def test_a_samples_file_a_process_has_only_just_created_does_not_fail_the_scrape(monkeypatch, tmp_path):
    """A worker's first sample of a kind creates its file empty and sizes it a
    moment later; a scrape in between used to raise (and took the acceptor with it)."""
    from prometheus_client import values

    from hpbroker.server import metrics

    monkeypatch.setenv(metrics_dir.ENV, str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    value_of_pid_4242 = values.MultiProcessValue(lambda: 4242)
    value = value_of_pid_4242("counter", "hpbroker_probe", "hpbroker_probe_total", (), (), "a probe")
    value.inc(3)
    (tmp_path / "counter_4243.db").write_bytes(b"")  # created, not yet sized
    text = metrics.render().decode()
    assert "hpbroker_probe_total 3.0" in text
