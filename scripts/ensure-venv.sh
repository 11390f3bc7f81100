# Sourced by the other scripts: create .venv in the repo root and install the
# project into it (with the given extras) when it is missing or out of date.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"
STAMP="$VENV/.hpbroker-installed${EXTRAS:+-$EXTRAS}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
# Reinstall only when pyproject.toml changed since the last install.
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    touch "$STAMP"
fi
