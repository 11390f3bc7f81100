#!/usr/bin/env bash
# Installs hpbroker into .venv if needed and runs the broker: standalone, data
# under ./data, listening on 127.0.0.1:9092.  Extra arguments go to `hpbroker serve`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/ensure-venv.sh"
cd "$ROOT"
exec "$VENV/bin/hpbroker" serve --data-dir ./data --listen 127.0.0.1:9092 "$@"
