#!/usr/bin/env bash
# Audit the locked dependencies (requirements/constraints.txt) for known vulnerabilities
# with pip-audit. It needs PyPI's per-release JSON API or OSV: on a machine that reaches
# only a package mirror, pip-audit reports every package as "not found" instead.
# Ignored on purpose (see SECURITY.md): diskcache's pickle advisory (GHSA-w8v5-vhqr-4h9v):
# llama-cpp-python depends on it, Parley never opens a disk cache, no release fixes it.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${TMPDIR:-/tmp}/parley-audit-tools
if [ ! -x "$tools/bin/pip-audit" ]; then
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install --disable-pip-version-check -q "pip-audit==2.10.1"
fi
exec "$tools/bin/pip-audit" -r requirements/constraints.txt --no-deps --disable-pip \
  --progress-spinner off --ignore-vuln GHSA-w8v5-vhqr-4h9v --ignore-vuln PYSEC-2026-2447 "$@"
