#!/usr/bin/env bash
# Set up (first run only) and run every check: lint, format, types, the whole test suite.
# Arguments go to pytest (e.g. -k streaming, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh local,embed,dev
.venv/bin/ruff check src tests examples
.venv/bin/ruff format --check src tests examples
.venv/bin/mypy
exec .venv/bin/pytest "$@"
