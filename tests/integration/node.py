"""Node.js clients for the integration tests: each npm package is installed
into ``.venv/node`` on first use, and each test script prints one JSON line
last, which ``run`` returns."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREFIX = REPO / ".venv" / "node"
SCRIPTS = Path(__file__).resolve().parent / "js"


def installed(spec: str, min_node: tuple[int, int, int] = (0, 0, 0)) -> Path:
    """``node_modules`` holding ``spec`` (``name@version``), installed if it is not."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("Node.js and npm are needed (scripts/ensure-system-packages.sh installs them)")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout
    found = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    if found < min_node:
        pytest.fail(f"{spec} needs Node.js {'.'.join(map(str, min_node))} or later, this is {version.strip()}")
    name, _, wanted = spec.rpartition("@")
    package = PREFIX / "node_modules" / name / "package.json"
    if not package.exists() or json.loads(package.read_text()).get("version") != wanted:
        PREFIX.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund", "--silent", spec],
                       check=True, timeout=300)
    return PREFIX / "node_modules"


def run(node_modules: Path, script: str, *args: str, timeout: float = 120, env: dict | None = None) -> dict:
    """Run ``js/<script>`` under Node.js (with ``env`` added to its bare
    environment); the JSON line it printed last."""
    done = subprocess.run(["node", str(SCRIPTS / script), *args],
                          env={"NODE_PATH": str(node_modules), "PATH": "/usr/bin:/bin:/usr/local/bin", **(env or {})},
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])
