#!/usr/bin/env bash
# Refresh requirements/constraints.txt, the exact versions the two commands install.
# Every extra is resolved together, for Python 3.11+ on every platform, so any set of
# extras installs a tested combination. Arguments go to `uv pip compile`:
#   scripts/lock.sh                            # re-resolve, keeping today's pins
#   scripts/lock.sh --upgrade                  # move everything to the newest release
#   scripts/lock.sh --upgrade-package openai   # move one package
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${TMPDIR:-/tmp}/parley-lock-tools
if [ ! -x "$tools/bin/uv" ]; then
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install --disable-pip-version-check -q "uv==0.13.9"
fi
exec "$tools/bin/uv" pip compile pyproject.toml --all-extras --universal \
  --python-version 3.11 --custom-compile-command scripts/lock.sh \
  --output-file requirements/constraints.txt "$@"
