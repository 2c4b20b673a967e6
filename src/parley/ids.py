"""Identifiers: a prefix and a time-ordered random body (sorts by creation time)."""

from __future__ import annotations

import hashlib
import secrets
import time


def new_id(prefix: str) -> str:
    return f"{prefix}_{time.time_ns() // 1000:014x}{secrets.token_hex(6)}"


def client_conversation_id(owner: str, client_id: str) -> str:
    """The conversation a client-made id (Langchain-Chatchat makes its own) names for
    ``owner``: the same for the same pair, never shared between owners."""
    digest = hashlib.sha256(f"{owner}\x00{client_id}".encode()).hexdigest()
    return f"conv_c{digest[:31]}"
