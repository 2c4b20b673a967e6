#!/usr/bin/env bash
# Set up (first run only) and start Parley with its embedded defaults:
# SQLite in ~/.local/share/parley and the local SmolLM2 model, on http://127.0.0.1:8000.
#
# Usage: scripts/serve.sh [--no-local-model | --local-model] [parley serve options]
#   --no-local-model  skip the local model (no llama-cpp-python build): for OpenAI,
#                     Ollama, Anthropic, Gemini or any other configured provider
#   --local-model     build it even when a provider is set in the environment
# With OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY or GEMINI_API_KEY (GOOGLE_API_KEY)
# set and no local model built yet, the build is skipped unless --local-model is given.
# Other arguments go to `parley serve` (e.g. --port 9000, --config examples/parley.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
choice=auto
case "${1:-}" in
  --no-local-model) choice=no; shift ;;
  --local-model) choice=yes; shift ;;
esac
extras=local,embed
if [ "$choice" = no ]; then
  extras=embed
elif [ "$choice" = auto ] && [ -n "${OPENAI_API_KEY:-}${OPENAI_BASE_URL:-}${ANTHROPIC_API_KEY:-}${GEMINI_API_KEY:-}${GOOGLE_API_KEY:-}" ] \
  && [[ ",$(cut -d' ' -f1 .venv/.parley-installed 2>/dev/null)," != *,local,* ]]; then
  echo "A provider is set in the environment: skipping the local model build" \
    "(scripts/serve.sh --local-model builds it)." >&2
  extras=embed
fi
scripts/setup.sh "$extras"
exec .venv/bin/parley serve "$@"
