"""How files that users (or models) supplied are sent back: never as a page of this origin.

An uploaded HTML, SVG or script file opened from ``/v1/files/...`` or a knowledge
document's ``/content`` would otherwise run as a page of Parley's own origin, next to the
web UI and its session cookie. So every such download is sent with ``nosniff`` (the
browser keeps the declared type), a Content-Security-Policy that sandboxes it (no
script, no same-origin access, nothing loaded but its own images and inline styles),
and as an attachment, unless it is a raster image, a PDF or plain text: those a browser
shows inline without running anything. A PDF goes without the policy: Chromium's viewer
does not open a sandboxed one (``api/chatchat/docs.py`` learned it), and a response
typed ``application/pdf`` and never sniffed is only ever shown by the PDF viewer, whose
scripts (if any) do not run as this origin. The file name travels as RFC 5987's
``filename*`` (UTF-8, percent-encoded), which every browser in use reads.

What does not belong here: which file a route serves and its media type (the routes).
"""

from __future__ import annotations

from urllib.parse import quote

CSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
INLINE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf", "text/plain"}
)
"""Shown in the browser; anything else is downloaded."""


def download_headers(filename: str, media_type: str) -> dict[str, str]:
    """The headers of a user-supplied file named ``filename`` sent as ``media_type``."""
    base = media_type.split(";", 1)[0].strip().lower()
    disposition = "inline" if base in INLINE_TYPES else "attachment"
    encoded = quote(_clean(filename), safe="")
    headers = {
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{encoded}",
        "X-Content-Type-Options": "nosniff",
    }
    if base != "application/pdf":
        headers["Content-Security-Policy"] = CSP
    return headers


def _clean(filename: str) -> str:
    """The name without folders or control characters (never empty)."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(char for char in name if char.isprintable())
    return name.strip() or "download"
