#!/usr/bin/env python3
"""An example command hook for Parley: a small web_fetch policy.

Configure it (paths are relative to the directory the server runs in):

    interceptors:
      hooks:
        - name: web-policy
          event: before_tool_call
          command: ["./examples/hooks/policy.py"]
          tools: [web_fetch]

Parley runs it without a shell, with the call as JSON on stdin ("event", "tool",
"arguments", "tokens", "cost_usd", ...), and reads the exit code:

- exit 1, the reason on stdout: the URL's host (or a domain above it) is blocked;
- exit 2, new arguments as JSON on stdout: ``max_chars`` was over MAX_CHARS and is clamped;
- exit 0: anything else goes through unchanged.
"""

from __future__ import annotations

import json
import sys
from urllib.parse import urlsplit

BLOCKED_HOSTS = frozenset({"tracker.example.com", "ads.example.net", "internal.example.org"})
MAX_CHARS = 10_000


def blocked(url: str) -> str | None:
    """The blocklisted domain ``url`` belongs to, if any."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    for domain in BLOCKED_HOSTS:
        if host == domain or host.endswith("." + domain):
            return domain
    return None


def main() -> int:
    payload = json.load(sys.stdin)
    if payload.get("event") != "before_tool_call" or payload.get("tool") != "web_fetch":
        return 0
    arguments = dict(payload.get("arguments") or {})
    domain = blocked(str(arguments.get("url", "")))
    if domain is not None:
        print(f"pages on {domain} may not be fetched from this server")
        return 1
    max_chars = arguments.get("max_chars")
    if isinstance(max_chars, int) and max_chars > MAX_CHARS:
        arguments["max_chars"] = MAX_CHARS
        print(json.dumps(arguments))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
