"""The web UI: ``/`` and the single-page app's own routes answer its ``index.html``,
``/assets/...`` its files; ``/connect`` is the page saying how to connect a client.

The bundle is the folder ``web.static_dir`` (default: the installed package's
``parley/web/static``). Without its ``index.html`` (a source checkout that has not built
it), or with ``web.enabled`` off, ``/`` is the connect page, as before there was a UI,
and the app's routes answer 404.

``index.html`` is sent with ``Cache-Control: no-cache`` (a new release shows at once);
the assets, whose names carry a hash of their content, as immutable for a year. Every
answer here carries a Content-Security-Policy that lets the page load and reach nothing
but this origin, and may not be framed. An asset path is resolved inside ``assets/``
(no ``..``, no hidden files, no symbolic link leading out), else 404.

What does not belong here: the connect page's text (``api/home.py``), the bundle's
source (the repository's top-level ``web/``).
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter, Request
from starlette.responses import FileResponse, Response

from parley.api.errors import error_response
from parley.api.home import connect_page
from parley.errors import NotFound
from parley.settings import WebSettings
from parley.web import STATIC_DIR

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'; object-src 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
APP_ROUTES = (
    "/c/{conversation_id}",
    "/kb",
    "/kb/{knowledge_base_id}",
    "/assistants",
    "/memory",
    "/settings",
    "/sign-in",
)
"""The single-page app's own addresses: a reload there gets ``index.html``."""
_UI_PATH = re.compile(r"/(?:|connect|c/[^/]+|kb|kb/[^/]+|assistants|memory|settings|sign-in)")
ASSETS = "/assets/"
IMMUTABLE = "public, max-age=31536000, immutable"
MEDIA_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".webmanifest": "application/manifest+json",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".avif": "image/avif",
    ".ico": "image/x-icon",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
    ".otf": "font/otf",
    ".wasm": "application/wasm",
}
"""Set here, not guessed from the system's tables (which differ between machines)."""


def is_ui_path(path: str) -> bool:
    """Whether ``path`` is the UI's page or one of its assets (not the API)."""
    return path.startswith(ASSETS) or _UI_PATH.fullmatch(path) is not None


class WebUI:
    def __init__(self, settings: WebSettings) -> None:
        self.enabled = settings.enabled
        self.folder = (settings.static_dir or STATIC_DIR).resolve()
        self.assets = self.folder / "assets"

    def index(self) -> Path | None:
        """The bundle's ``index.html`` when the UI is served (looked for on every
        request: a bundle built while the server runs is served at once)."""
        page = self.folder / "index.html"
        return page if self.enabled and page.is_file() else None

    def asset(self, path: str) -> Path | None:
        """The file ``path`` names inside ``assets/``, or None."""
        parts = path.split("/")
        if not self.enabled or "\\" in path or "\x00" in path:
            return None
        if any(not part or part.startswith(".") for part in parts):
            return None  # "", ".", "..", hidden files
        found = (self.assets / path).resolve()
        if not found.is_relative_to(self.assets) or not found.is_file():
            return None
        return found

    def router(self) -> APIRouter:
        router = APIRouter(include_in_schema=False)
        router.add_api_route("/", self.root, methods=["GET"])
        router.add_api_route("/connect", self.connect, methods=["GET"])
        for path in APP_ROUTES:
            router.add_api_route(path, self.page, methods=["GET"])
        router.add_api_route(ASSETS + "{path:path}", self.file, methods=["GET"])
        return router

    async def root(self, request: Request) -> Response:
        index = self.index()
        if index is None:
            return connect_page(request, web_ui=False)
        return _index(index)

    async def connect(self, request: Request) -> Response:
        return connect_page(request, web_ui=self.index() is not None)

    async def page(self, request: Request) -> Response:
        index = self.index()
        return _not_found(request.url.path) if index is None else _index(index)

    async def file(self, request: Request, path: str) -> Response:
        found = self.asset(path)
        if found is None:
            return _not_found(request.url.path)
        media_type = MEDIA_TYPES.get(found.suffix.lower(), "application/octet-stream")
        return FileResponse(
            found, media_type=media_type, headers={"Cache-Control": IMMUTABLE, **SECURITY_HEADERS}
        )


def _index(index: Path) -> Response:
    return FileResponse(
        index,
        media_type="text/html; charset=utf-8",
        headers={"Cache-Control": "no-cache", **SECURITY_HEADERS},
    )


def _not_found(path: str) -> Response:
    response = error_response(NotFound(f"nothing at {path[:200]!r}", code="not_found"))
    response.headers.update(SECURITY_HEADERS)
    return response
