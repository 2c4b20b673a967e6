"""Who is calling: API keys (stored as hashes) and the loopback rule.

With no active key, only loopback clients are served, whatever key they send (the
OpenAI SDK always sends one), and they act as the owner ``local``. That trust is only
given to requests that a browser page elsewhere could not have made: the ``Host`` must
be a loopback name (no DNS rebinding) and an ``Origin``, when sent, must be loopback too
(no cross-site form posts). Once a key exists, every request needs ``Authorization:
Bearer <key>`` (or ``x-api-key``) naming an active key, and acts as its owner (a
``Caller``: owner, key id and name, and whether the key is an admin's). Keys in
query strings are never read, so the decision is the same however a URL is spelled.

A browser signed in with ``POST /v1/session`` sends the ``parley_session`` cookie
instead (``api/cookies.py``): it counts wherever a key does and acts as the key it was
made with, while that key is active and until the session expires; a key in a header
wins over it. A request the cookie authenticates that changes something must come from
a page of this server's own origin (403 ``csrf_origin_mismatch`` otherwise).

Active keys are cached in memory. ``parley keys`` touches ``keys.changed`` in the data
folder after every change, and the cache is reloaded when that file's time changes, so
a created or revoked key counts from the next request on (a session's key is checked
in the same cache on every request: revoking it ends its sessions too).
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import HTTPConnection, Request

from parley.api.cookies import SessionCache, check_same_origin, hash_token, session_token
from parley.errors import AuthenticationFailed, PermissionDenied
from parley.identity import LOCAL_CALLER, Caller
from parley.store.keys import KeyStore, StoredKey
from parley.store.sessions import StoredSession

log = logging.getLogger(__name__)

KEY_PREFIX = "sk-parley-"
MARKER = "keys.changed"


def new_key() -> tuple[str, str, str]:
    """A fresh key: (the key itself, its hash, its display prefix)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key), key[: len(KEY_PREFIX) + 6]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def issue_key(
    keys: KeyStore, owner: str, name: str, *, admin: bool = False
) -> tuple[str, StoredKey]:
    """Make and store a new key: (the key itself, shown only now; its row)."""
    key, key_hash, prefix = new_key()
    return key, await keys.create(owner, name, key_hash, prefix, admin=admin)


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


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request acts as, and the browser session that said so (None: a key in a
    header, or keyless loopback use)."""

    caller: Caller
    session: StoredSession | None = None
    keyless: bool = False


MISSING_KEY = "missing API key: send Authorization: Bearer <key>"


class Authenticator:
    def __init__(
        self,
        keys: KeyStore,
        data_dir: Path,
        *,
        allow_loopback_without_keys: bool,
        sessions: SessionCache | None = None,
    ) -> None:
        self._keys = keys
        self._marker = data_dir / MARKER
        self._allow_loopback = allow_loopback_without_keys
        self._sessions = sessions
        self._active: dict[str, Caller] | None = None
        self._by_id: dict[str, tuple[str, Caller]] = {}
        self._stamp: int | None = None

    async def _active_keys(self) -> dict[str, Caller]:
        try:
            stamp: int | None = os.stat(self._marker).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if self._active is None or stamp != self._stamp:
            self._active = await self._keys.active()
            self._by_id = {c.key_id: (h, c) for h, c in self._active.items()}
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
        return (await self.identify(connection)).caller

    async def identify(self, connection: HTTPConnection, *, cookie: bool = True) -> Identity:
        """Who the request acts as, from its key, else its session cookie (unless
        ``cookie`` is False), else the loopback rule while no key exists. Raises 401 or
        403."""
        active = await self._active_keys()
        if not active:
            return Identity(self._keyless(connection), keyless=True)
        key = presented_key(connection)
        if key:
            return Identity(self._key_caller(active, key))
        token = session_token(connection) if cookie else None
        if token is None:
            raise AuthenticationFailed(MISSING_KEY)
        identity = await self._session(token)
        check_same_origin(connection)
        return identity

    def _key_caller(self, active: dict[str, Caller], key: str) -> Caller:
        caller = active.get(hash_key(key))
        if caller is None:
            raise AuthenticationFailed("invalid API key")
        return caller

    async def sign_in_caller(self, key: str) -> Caller:
        """The caller an active ``key`` makes (401 otherwise), to start a session with."""
        return self._key_caller(await self._active_keys(), key)

    async def bucket(self, connection: HTTPConnection) -> str:
        """Whose requests a request counts among for admission control: its key's hash
        (the session's key for the cookie); "" for keyless use and without either."""
        if not await self._active_keys():
            return ""
        key = presented_key(connection)
        if key:
            return hash_key(key)
        found = await self._session_of(session_token(connection))
        return "" if found is None else found[1]

    async def _session(self, token: str) -> Identity:
        found = await self._session_of(token)
        if found is None:
            raise AuthenticationFailed(
                "your session has ended (signed out, expired, or its key was revoked): "
                "sign in again",
                code="invalid_session",
            )
        return Identity(found[2], found[0])

    async def _session_of(self, token: str | None) -> tuple[StoredSession, str, Caller] | None:
        """The live session of ``token``, with its key's hash and caller, while that key
        is active (the keys are loaded already)."""
        if token is None or self._sessions is None:
            return None
        session = await self._sessions.get(hash_token(token))
        found = None if session is None else self._by_id.get(session.key_id)
        if session is None or found is None:
            return None
        return session, found[0], found[1]

    def forget_session(self, token_hash: str) -> None:
        if self._sessions is not None:
            self._sessions.forget(token_hash)

    def _keyless(self, connection: HTTPConnection) -> Caller:
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
