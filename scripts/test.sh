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
# The web UI's browser tests (tests/web) drive Debian's Chromium (never a browser
# downloaded by Playwright), and its bundle test rebuilds web/ with npm: install what is
# missing where we can (root or sudo, and apt-get); elsewhere those tests skip, saying how.
web_packages=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
  || [ -n "${PARLEY_CHROMIUM:-}" ] || web_packages+=(chromium)
# npm only when there is none: a Node.js from elsewhere (NodeSource's) stays as it is
command -v npm >/dev/null || web_packages+=(nodejs npm)
if [ ${#web_packages[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  if [ ${#sudo[@]} -eq 0 ] || sudo -n true 2>/dev/null; then
    echo "Installing ${web_packages[*]} (the web UI's browser and bundle tests)..." >&2
    "${sudo[@]}" apt-get install -y -qq "${web_packages[@]}" >/dev/null 2>&1 \
      || { "${sudo[@]}" apt-get update -qq >/dev/null \
        && "${sudo[@]}" apt-get install -y -qq "${web_packages[@]}" >/dev/null; } \
      || echo "Could not install ${web_packages[*]}: the web UI's tests that need them skip." >&2
  fi
fi
# The suite starts a few hundred server and CLI processes: compile the sources once
# here (each process would compile them again where PYTHONDONTWRITEBYTECODE is set:
# about a second more per server start).
.venv/bin/python -m compileall -q -j 0 src tests >/dev/null
.venv/bin/ruff check src tests examples
.venv/bin/ruff format --check src tests examples
.venv/bin/mypy
# the layers of src/parley ([tool.importlinter] in pyproject.toml)
.venv/bin/lint-imports --no-cache
# Two workers by default (PARLEY_TEST_WORKERS: another number; 0 runs in this process).
# A module's tests stay on one worker, with the servers their fixtures start.
workers=(-n "${PARLEY_TEST_WORKERS:-2}" --dist loadfile)
# schemathesis's generated cases are not dispatched by pytest-xdist (9 of its 282 tests
# run there): with no test paths given, the fuzzing module runs first, in one process.
fuzz=tests/api/test_schema_fuzz.py
for arg in "$@"; do
  if [[ $arg != -* && -e ${arg%%::*} ]]; then
    exec .venv/bin/pytest "${workers[@]}" "$@"  # the paths asked for, as asked
  fi
done
status=0
.venv/bin/pytest -p no:xdist "$fuzz" "$@" || status=$?
[ "$status" -eq 0 ] || [ "$status" -eq 5 ] || exit "$status"  # 5: -k left none of them
.venv/bin/pytest "${workers[@]}" --ignore "$fuzz" "$@"
# The API tests of what is stored, again with every server on PostgreSQL with pgvector
# (the store, knowledge and memory tests above already ran on both engines).
postgres_api=()
for name in branches approvals usage_limits_api assistants assistant_chat summaries mcp_api \
  knowledge_api knowledge_chat memories idempotency sessions tools_and_conversations \
  chat_completions conversation_search keys_api titles browser_sessions files_upload \
  downloads stateless_spend revocation; do
  postgres_api+=("tests/api/test_$name.py")
done
status=0
TESTS_DATABASE=postgresql .venv/bin/pytest "${workers[@]}" "${postgres_api[@]}" "$@" || status=$?
[ "$status" -eq 0 ] || [ "$status" -eq 5 ] || exit "$status"
