# Sourced by the other scripts: create .venv in the repo root and install the
# project into it (with the extras named in $1) when it is missing,
# pyproject.toml changed since the last install, or the install was made
# from another path (a moved or copied checkout: its entry points and the
# editable install name the old one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"
STAMP="$VENV/.hpbroker-installed${EXTRAS:+-$EXTRAS}"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if [ ! -x "$VENV/bin/python" ]; then
    if ! python3 -m venv "$VENV" 2>/dev/null; then
        # Debian ships venv separately from python3.
        rm -rf "$VENV"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$VENV"
    fi
fi
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ] || [ "$(cat "$STAMP")" != "$ROOT" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    "$VENV/bin/python" -m hpbroker.kernels.compile >/dev/null  # the kernels, compiled into the package
    echo "$ROOT" >"$STAMP"
fi
