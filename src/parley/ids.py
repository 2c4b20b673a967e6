"""Identifiers: a prefix and a time-ordered random body (sorts by creation time)."""

from __future__ import annotations

import secrets
import time


def new_id(prefix: str) -> str:
    return f"{prefix}_{time.time_ns() // 1000:014x}{secrets.token_hex(6)}"
