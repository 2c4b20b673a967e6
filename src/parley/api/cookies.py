"""The browser's session cookie: its token, the header that sets it, the sessions behind
it (looked up briefly cached), and the same-origin rule for the requests it carries.

A browser signs in by giving a key once (``POST /v1/session``); it then holds
``parley_session``, an HttpOnly, ``SameSite=Strict`` cookie with a random token, of which
the server keeps only the SHA-256 (``store/sessions.py``). A browser sends a cookie with
every request to its site, whoever's page made it, so a request the cookie authenticates
that changes something (POST, PUT, PATCH, DELETE) must come from a page of this very
origin: its ``Origin`` must be this server's own scheme, host and port (the scheme as
the connection arrived: uvicorn takes ``X-Forwarded-Proto`` from the proxies it trusts,
loopback by default), or, without ``Origin``, ``Sec-Fetch-Site`` must say
``same-origin``; else 403 ``csrf_origin_mismatch``. Requests with a key in a header are
not concerned: no browser adds that header by itself.

Session lookups are cached for ``CACHE_SECONDS``, unknown tokens too (a token is never
made twice, so one found unknown stays so). Signing out here forgets at once; a
sign-out on another instance counts here within ``CACHE_SECONDS``. Whether the session's
key is still active is checked on every request (``api/auth.py``), with the key cache
that revocations already refresh.
"""

from __future__ import annotations

import hashlib
import re
import time
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from parley.errors import PermissionDenied
from parley.store.sessions import SessionStore, StoredSession

COOKIE = "parley_session"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CACHE_SECONDS = 5.0
CACHE_SIZE = 10_000
_TOKEN = re.compile(r"[A-Za-z0-9_-]{20,128}")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def session_token(connection: HTTPConnection) -> str | None:
    """The session token the request's cookie holds, if it looks like one."""
    token = connection.cookies.get(COOKIE)
    return token if token and _TOKEN.fullmatch(token) else None


def set_cookie(connection: HTTPConnection, token: str, max_age: int) -> str:
    """The ``Set-Cookie`` value holding ``token`` for ``max_age`` seconds (0: clear it),
    ``Secure`` when the request came over https."""
    secure = "; Secure" if connection.url.scheme in ("https", "wss") else ""
    return f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}"


def check_same_origin(connection: HTTPConnection) -> None:
    """Raise 403 ``csrf_origin_mismatch`` unless a request that changes something comes
    from a page of this server's own origin (see the module's docstring)."""
    if connection.scope.get("method") not in UNSAFE_METHODS:
        return
    origin = connection.headers.get("origin")
    if origin is None:
        if connection.headers.get("sec-fetch-site") == "same-origin":
            return
        raise _mismatch("it carries neither Origin nor Sec-Fetch-Site: same-origin")
    if _origin(origin) is None or _origin(origin) != own_origin(connection):
        raise _mismatch(f"its Origin is not this server's ({_shown(origin)})")


def check_not_cross_site(connection: HTTPConnection) -> None:
    """Raise 403 for a request a browser sent from a page of another origin (one that
    names its Origin, or says it is not same-origin); other clients pass."""
    origin = connection.headers.get("origin")
    if origin is not None and (
        _origin(origin) is None or _origin(origin) != own_origin(connection)
    ):
        raise _mismatch(f"its Origin is not this server's ({_shown(origin)})")
    site = connection.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise _mismatch(f"it came from a page elsewhere (Sec-Fetch-Site: {_shown(site)})")


def own_origin(connection: HTTPConnection) -> tuple[str, str, int] | None:
    """(scheme, host, port) the request was sent to: its scheme and ``Host`` header."""
    scheme = {"ws": "http", "wss": "https"}.get(connection.url.scheme, connection.url.scheme)
    host = connection.headers.get("host")
    return None if not host else _origin(f"{scheme}://{host}")


def _origin(value: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(value.strip())
        scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if not host or port is None or parts.path not in ("", "/"):
        return None
    return scheme, host, port


def _shown(value: str) -> str:
    return value[:100].encode("ascii", "replace").decode()


def _mismatch(why: str) -> PermissionDenied:
    return PermissionDenied(
        "a request signed in by the session cookie that changes something must come from "
        f"a page of this server; {why}",
        code="csrf_origin_mismatch",
    )


class SessionCache:
    """``SessionStore.get``, remembered for ``seconds`` (unknown tokens too)."""

    def __init__(
        self, store: SessionStore, seconds: float = CACHE_SECONDS, size: int = CACHE_SIZE
    ) -> None:
        self.store = store
        self._seconds = seconds
        self._size = size
        self._found: dict[str, tuple[StoredSession | None, float]] = {}
        self._forgets = 0
        """How many sessions were forgotten: a read that overlapped one is not kept."""

    async def get(self, token_hash: str) -> StoredSession | None:
        """The session of this token hash while it is live, else None."""
        now = time.monotonic()
        cached = self._found.get(token_hash)
        if cached is None or now - cached[1] >= self._seconds:
            session = await self._read(token_hash, now)
        else:
            session = cached[0]
        return session if session is not None and session.live(time.time()) else None

    async def _read(self, token_hash: str, now: float) -> StoredSession | None:
        """The stored session, remembered unless a session ended while it was read (the
        row read may be one a sign-out has just deleted: it is read again)."""
        for _ in range(3):
            forgets = self._forgets
            session = await self.store.get(token_hash)
            if forgets == self._forgets:
                self._remember(token_hash, session, now)
                return session
        return session  # sign-outs keep coming: answer, but remember nothing

    def forget(self, token_hash: str) -> None:
        self._forgets += 1
        self._found.pop(token_hash, None)

    def _remember(self, token_hash: str, session: StoredSession | None, now: float) -> None:
        self._found.pop(token_hash, None)
        while len(self._found) >= self._size:
            del self._found[next(iter(self._found))]  # the oldest
        self._found[token_hash] = (session, now)
