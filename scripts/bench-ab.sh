#!/usr/bin/env bash
# Figures 1, 4 and 6 of `parley bench` for the working tree against REV (default HEAD~1),
# side by side, rounds alternating: scripts/bench-ab.sh [REV] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD~1}
shift || true
before=$(mktemp -d)
trap 'git worktree remove --force "$before" >/dev/null 2>&1 || rm -rf "$before"' EXIT
git worktree add --detach -q "$before" "$rev"
scripts/setup.sh local,embed,dev >/dev/null
.venv/bin/python -m parley.bench.compare "$before/src" src "$@"
