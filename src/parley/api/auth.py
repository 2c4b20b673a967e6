"""Who is calling: API keys (stored as hashes) and the loopback rule.

With no active key in the database, only loopback clients are served, whatever key
they send (the OpenAI SDK always sends one), and they act as the owner ``local``. Once
a key exists, every request needs ``Authorization: Bearer <key>`` (or ``x-api-key``)
naming an active key, and acts as that key's owner. Keys in query strings are never
read, so the decision is the same however a URL is spelled.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets

from starlette.requests import HTTPConnection

from parley.errors import AuthenticationFailed
from parley.store.repository import KeyStore

LOCAL_OWNER = "local"
KEY_PREFIX = "sk-parley-"


def new_key() -> tuple[str, str, str]:
    """A fresh key: (the key itself, its hash, its display prefix)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key), key[: len(KEY_PREFIX) + 6]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def presented_key(connection: HTTPConnection) -> str:
    header = connection.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return connection.headers.get("x-api-key", "").strip()


class Authenticator:
    def __init__(self, keys: KeyStore, *, allow_loopback_without_keys: bool) -> None:
        self._keys = keys
        self._allow_loopback = allow_loopback_without_keys

    async def owner(self, connection: HTTPConnection) -> str:
        key = presented_key(connection)
        any_key, owner = await self._keys.lookup(hash_key(key) if key else "")
        if owner is not None:
            return owner
        if any_key:
            raise AuthenticationFailed(
                "invalid API key" if key else "missing API key: send Authorization: Bearer <key>"
            )
        client = connection.client.host if connection.client else None
        if self._allow_loopback and is_loopback(client):
            return LOCAL_OWNER
        raise AuthenticationFailed(
            "no API keys exist and this client is not on loopback: "
            "create one with `parley keys create`"
        )
