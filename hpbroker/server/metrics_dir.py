"""The directory where every broker process writes its metric samples.

prometheus-client picks its multiprocess mode when first imported, from
``PROMETHEUS_MULTIPROC_DIR``; so the acceptor calls ``prepare()`` before
anything imports ``hpbroker.server.metrics`` (this module imports no
prometheus-client on purpose), and the workers inherit it by fork.

A broker stopped by SIGKILL cannot remove its directory, so the name carries
the acceptor's pid and ``prepare()`` sweeps the directories of brokers that
are no longer running.
"""

import os
import shutil
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "hpbroker-metrics-"


def prepare() -> str:
    """A fresh samples directory for this broker, exported to the environment."""
    sweep_stale(tempfile.gettempdir())
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    os.environ[ENV] = path
    return path


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def sweep_stale(parent: str) -> list[str]:
    """Remove the samples directories left by brokers whose acceptor is gone."""
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        pid = _owner_pid(name)
        if pid is None or _running(pid):
            continue
        path = os.path.join(parent, name)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _owner_pid(name: str) -> int | None:
    if not name.startswith(PREFIX):
        return None
    pid, _, _ = name[len(PREFIX):].partition("-")
    return int(pid) if pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True
