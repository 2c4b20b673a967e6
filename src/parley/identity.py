"""Who is calling: the identity the HTTP edge establishes and everything below reads.

Shared vocabulary like ``messages.py``: importable anywhere. How a caller is
authenticated lives in ``api/auth.py``; this module only names the result.
"""

from __future__ import annotations

from dataclasses import dataclass

LOCAL_OWNER = "local"
LOCAL_KEY = "local"
"""What keyless loopback callers count as, for per-key limits and the audit log."""


@dataclass(frozen=True, slots=True)
class Caller:
    owner: str
    """Whose data this is: conversations, files and usage belong to an owner."""
    key_id: str = LOCAL_KEY
    """The API key used (its id, never the key), or ``local`` for keyless loopback."""
    key_name: str | None = None
    admin: bool = False
    """May see and change server-wide things (the interceptor chain, everyone's audit
    rows). Keyless loopback callers are the machine's operator, hence admins."""


LOCAL_CALLER = Caller(LOCAL_OWNER, LOCAL_KEY, None, admin=True)
