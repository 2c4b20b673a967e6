#!/usr/bin/env bash
# Set up (first run only) and start Parley with its embedded defaults:
# SQLite in ~/.local/share/parley and the local SmolLM2 model, on http://127.0.0.1:8000.
# Arguments go to `parley serve` (e.g. --port 9000, --config examples/parley.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh local,embed
exec .venv/bin/parley serve "$@"
