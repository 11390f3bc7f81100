#!/usr/bin/env bash
# Installs what the tests need (Debian packages, then .venv) and runs them.
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/ensure-system-packages.sh"
source "$ROOT/scripts/ensure-venv.sh" test
cd "$ROOT"
# lint and type checks first: seconds, and they name the line
"$VENV/bin/ruff" check --quiet .
"$VENV/bin/pyright" --warnings
exec "$VENV/bin/python" -m pytest -q "$@"
