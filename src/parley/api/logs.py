"""The access log, without secrets: query values that may hold one are masked.

Keys belong in the ``Authorization`` header, but a client may send ``?api_key=...``
(refused, and then written whole to uvicorn's access log). ``SecretQueryFilter`` masks
the values of query parameters whose names suggest a secret (key, token, secret,
password, auth, signature, credential) before a line is written. ``parley serve``
installs it on the ``uvicorn.access`` logger; it is process-wide logging, so the app
factory does not.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode

_SECRET_NAME = re.compile(r"key|token|secret|pass|auth|sig|credential|session", re.IGNORECASE)
MASK = "***"


def mask_query(path: str) -> str:
    """``path`` with the values of secret-looking query parameters masked."""
    base, question, query = path.partition("?")
    if not question or not query:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(_SECRET_NAME.search(name) for name, _ in pairs):
        return path
    masked = [(name, MASK if _SECRET_NAME.search(name) else value) for name, value in pairs]
    return f"{base}?{urlencode(masked, safe='*')}"


class SecretQueryFilter(logging.Filter):
    """For uvicorn's access lines: args (client, method, path, http version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], mask_query(args[2]), *args[3:])
        return True
