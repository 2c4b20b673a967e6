"""Who is calling: API keys (stored as hashes) and the loopback rule.

With no active key, only loopback clients are served, whatever key they send (the
OpenAI SDK always sends one), and they act as the owner ``local``. That trust is only
given to requests that a browser page elsewhere could not have made: the ``Host`` must
be a loopback name (no DNS rebinding) and an ``Origin``, when sent, must be loopback too
(no cross-site form posts). Once a key exists, every request needs ``Authorization:
Bearer <key>`` (or ``x-api-key``) naming an active key, and acts as its owner (a
``Caller``: owner, key id and name, and whether the key is an admin's). Keys in
query strings are never read, so the decision is the same however a URL is spelled.

Active keys are cached in memory. ``parley keys`` touches ``keys.changed`` in the data
folder after every change, and the cache is reloaded when that file's time changes, so
a created or revoked key counts from the next request on.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import HTTPConnection, Request

from parley.errors import AuthenticationFailed, PermissionDenied
from parley.identity import LOCAL_CALLER, Caller
from parley.store.repository import KeyStore

log = logging.getLogger(__name__)

KEY_PREFIX = "sk-parley-"
MARKER = "keys.changed"


def new_key() -> tuple[str, str, str]:
    """A fresh key: (the key itself, its hash, its display prefix)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key), key[: len(KEY_PREFIX) + 6]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def mark_keys_changed(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER).write_text(secrets.token_hex(8))


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _host_name(value: str) -> str:
    return urlsplit(f"//{value}").hostname or ""


def presented_key(connection: HTTPConnection) -> str:
    header = connection.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return connection.headers.get("x-api-key", "").strip()


class Authenticator:
    def __init__(
        self, keys: KeyStore, data_dir: Path, *, allow_loopback_without_keys: bool
    ) -> None:
        self._keys = keys
        self._marker = data_dir / MARKER
        self._allow_loopback = allow_loopback_without_keys
        self._active: dict[str, Caller] | None = None
        self._stamp: int | None = None

    async def _active_keys(self) -> dict[str, Caller]:
        try:
            stamp: int | None = os.stat(self._marker).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if self._active is None or stamp != self._stamp:
            self._active = await self._keys.active()
            self._stamp = stamp
        return self._active

    async def keys_required(self) -> bool:
        """Whether a request needs a key (False: keyless loopback use, while none exists)."""
        return bool(await self._active_keys())

    def forget(self) -> None:
        """Read the keys again on the next request (a revocation seen elsewhere)."""
        self._active = None

    async def owner(self, connection: HTTPConnection) -> str:
        return (await self.caller(connection)).owner

    async def caller(self, connection: HTTPConnection) -> Caller:
        active = await self._active_keys()
        key = presented_key(connection)
        if active:
            caller = active.get(hash_key(key)) if key else None
            if caller is None:
                raise AuthenticationFailed(
                    "invalid API key"
                    if key
                    else "missing API key: send Authorization: Bearer <key>"
                )
            return caller
        client = connection.client.host if connection.client else None
        if not (self._allow_loopback and is_loopback(client)):
            raise AuthenticationFailed(
                "no API keys exist and this client is not on loopback: "
                "create one with `parley keys create`"
            )
        host = _host_name(connection.headers.get("host", ""))
        origin = connection.headers.get("origin")
        if not is_loopback(host) or (origin and not is_loopback(urlsplit(origin).hostname)):
            raise PermissionDenied(
                "keyless loopback access is only for pages and clients on this machine "
                "(Host and Origin must be loopback); create a key with `parley keys create`"
            )
        return LOCAL_CALLER

    async def admin(self, connection: HTTPConnection) -> Caller:
        """The caller, who must be an admin (a key made with ``--admin``, or keyless
        loopback access, which is the machine's operator)."""
        caller = await self.caller(connection)
        if not caller.admin:
            raise PermissionDenied(
                "this needs an admin key (`parley keys create --admin`)", code="admin_required"
            )
        return caller


async def authenticated(request: Request) -> None:
    """A route dependency: the request is refused (401, 403) unless its caller is known,
    before FastAPI reads or validates its body. Routes still ask ``caller`` for who it is
    (the key table is cached: a second lookup is a dictionary's)."""
    await request.app.state.parley.auth.caller(request)


class RevocationWatcher:
    """Looks for keys revoked since it last looked, every ``every`` seconds, in the
    database every instance shares: the authenticator forgets its keys, and the running
    replies of those keys end (``end`` says how many did)."""

    def __init__(
        self,
        keys: KeyStore,
        auth: Authenticator,
        end: Callable[[set[str]], int],
        every: float,
    ) -> None:
        self._keys = keys
        self._auth = auth
        self._end = end
        self._every = every
        self._since = time.time()
        self._seen: set[str] = set()  # revoked at exactly ``_since``: handled already

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            try:
                await self.check()
            except SQLAlchemyError as exc:
                log.warning("could not look for revoked keys: %s", exc)

    async def check(self) -> None:
        revoked, latest = await self._keys.revoked_since(self._since)
        fresh = revoked - self._seen
        if latest > self._since:
            self._since, self._seen = latest, set()
        self._seen |= revoked
        if not fresh:
            return
        self._auth.forget()
        ended = self._end(fresh)
        if ended:
            log.info(
                "%d running repl%s of a revoked key ended", ended, "y" if ended == 1 else "ies"
            )
