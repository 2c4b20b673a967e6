#!/usr/bin/env bash
# Set up (first run only) and run every check: lint, format, types, the whole test suite.
# Arguments go to pytest (e.g. -k streaming, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh local,embed,dev
# The shell tool's sandbox is Debian's bubblewrap: its tests need it (they skip only
# where there is no apt-get, such as macOS).
if ! command -v bwrap >/dev/null && command -v apt-get >/dev/null; then
  echo "Installing bubblewrap (the shell tool's sandbox)..." >&2
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  "${sudo[@]}" apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
    || { "${sudo[@]}" apt-get update -qq >/dev/null && "${sudo[@]}" apt-get install -y -qq bubblewrap >/dev/null; }
fi
# The suite starts a few hundred server and CLI processes: compile the sources once
# here (each process would compile them again where PYTHONDONTWRITEBYTECODE is set:
# about a second more per server start).
.venv/bin/python -m compileall -q -j 0 src tests >/dev/null
.venv/bin/ruff check src tests examples
.venv/bin/ruff format --check src tests examples
.venv/bin/mypy
exec .venv/bin/pytest "$@"
