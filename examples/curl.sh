#!/usr/bin/env bash
# Parley over plain HTTP: a streamed reply, then the stored conversation.
#   PARLEY=http://127.0.0.1:8000 bash examples/curl.sh
set -euo pipefail
PARLEY=${PARLEY:-http://127.0.0.1:8000}
AUTH=(-H "Authorization: Bearer ${PARLEY_API_KEY:-not-needed-on-loopback}")

curl -sN "$PARLEY/v1/chat/completions" "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 16, "stream": true}'
echo
curl -s "$PARLEY/v1/conversations?limit=1" "${AUTH[@]}"
echo
