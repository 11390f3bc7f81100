"""The directory where every broker process writes its metric samples.

prometheus-client picks its multiprocess mode when first imported, from
``PROMETHEUS_MULTIPROC_DIR``; so the acceptor calls ``prepare()`` before
anything imports ``hpbroker.server.metrics`` (this module imports no
prometheus-client on purpose), and the workers inherit it by fork.
"""

import os
import shutil
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare() -> str:
    """A fresh samples directory for this broker, exported to the environment."""
    path = tempfile.mkdtemp(prefix="hpbroker-metrics-")
    os.environ[ENV] = path
    return path


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
