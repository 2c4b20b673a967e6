"""Images a reply carries inline as base64 ``data:`` URLs, saved as files and served by URL.

The finish transform for images: when a reply is complete, ``rewrite_markdown_images``
replaces each ``![alt](data:image/...;base64,...)`` with a link to a saved file, so the
stored reply stays small. Images a client uploads (``POST /v1/files``) are saved here
too (``save_bytes``). ``ImageSaver.open_image`` finds a saved image for the route that
serves it, and ``inline_own_images`` turns a request's image URL of this server (the
file's ``/v1/files/{id}[/content]``, which an upstream could not fetch) into the owner's
image as a ``data:`` URL.

Nothing from the input names a file: ids are made here (``new_id("img")``), the folder
is a hash of the owner, and the extension comes from the image's own first bytes. Only
PNG, JPEG, GIF, WebP and BMP are kept, and only when the content really is one of them
(a declared type that disagrees with the content is corrected from the content). Files
are written atomically (a temporary file, then a rename). An owner sees only its own
images: another owner's id looks missing.

What does not belong here: the HTTP route, authentication, and deciding when to run.
The calls block on the disk; an async caller runs them in a thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from parley.errors import InvalidRequest, ParleyError, PayloadTooLarge, UnsupportedMediaType
from parley.ids import new_id
from parley.messages import ImagePart, Message, Part

log = logging.getLogger(__name__)

EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/bmp": "bmp",
}
"""The media types kept, and the extension each is saved with."""
KEPT = "PNG, JPEG, GIF, WebP or BMP"
_MEDIA_TYPES = {ext: media_type for media_type, ext in EXTENSIONS.items()}
_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "image/x-ms-bmp": "image/bmp",
    "image/x-bmp": "image/bmp",
}
_ID = re.compile(r"img_[0-9a-f]{1,64}")
_BMP_HEADERS = frozenset({12, 40, 52, 56, 64, 108, 124})
"""The sizes of BMP's info headers (``BITMAPCOREHEADER`` ... ``BITMAPV5HEADER``)."""
_OWN_PATH = re.compile(r"(?:/[^/]+)*/v1/files/(?P<id>img_[0-9a-f]{1,64})(?:/content)?/?")
"""The path of a saved image's URL on this server (maybe behind a proxy's prefix)."""
# Linear over any text: the alt text holds no "[", the URL only what a data URL holds
# (not the "![" or "(" of the next image) and never gives it back, and a title is at
# most 300 characters; the old pattern was quadratic on an unclosed image (32,000
# characters took 9 s)
_MARKDOWN_IMAGE = re.compile(
    r"!\[(?P<alt>[^\[\]\n]{0,1000})\]\(\s*"
    r"(?P<url>data:image/[A-Za-z0-9+/=;,.:%_-]*+)"
    r"(?P<rest>(?:\s[^)\n]{0,300})?)\)",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class StoredImage:
    id: str
    path: Path
    url: str
    media_type: str
    """From the content's first bytes, not from what the data URL declared."""
    size: int
    """Bytes on disk."""


class ImageSaver:
    """Saves images under ``directory/<hash of owner>/<id>.<ext>``; ``url_prefix`` plus
    ``/<id>`` is where the route serves them."""

    def __init__(self, directory: Path, url_prefix: str, *, max_bytes: int = 10 * 2**20) -> None:
        self.directory = directory
        self.url_prefix = url_prefix.rstrip("/")
        self.max_bytes = max_bytes

    def save_data_url(self, owner: str, data_url: str) -> StoredImage:
        """Save a ``data:image/<type>;base64,<data>`` image. Raises ``InvalidRequest``
        (not a base64 data URL), ``UnsupportedMediaType`` (not one of the kept types) or
        ``PayloadTooLarge`` (over ``max_bytes``)."""
        return self.save_bytes(owner, self._decode(data_url))

    def save_bytes(self, owner: str, data: bytes) -> StoredImage:
        """Save an image's bytes (an upload). Raises ``UnsupportedMediaType`` (not one
        of the kept types, by its first bytes) or ``PayloadTooLarge`` (over ``max_bytes``)."""
        if len(data) > self.max_bytes:
            raise PayloadTooLarge(f"the image is larger than {self.max_bytes} bytes")
        media_type = sniff_media_type(data)
        if media_type is None:
            raise UnsupportedMediaType(f"the image is not a {KEPT} image")
        image_id = new_id("img")
        folder = self._folder(owner)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{image_id}.{EXTENSIONS[media_type]}"
        _write_atomically(path, data)
        return StoredImage(image_id, path, f"{self.url_prefix}/{image_id}", media_type, len(data))

    def open_image(self, owner: str, image_id: str) -> tuple[Path, str] | None:
        """(path, media type) of ``owner``'s image ``image_id``; None if there is none."""
        if not _ID.fullmatch(image_id):
            return None
        folder = self._folder(owner)
        for ext, media_type in _MEDIA_TYPES.items():
            path = folder / f"{image_id}.{ext}"
            if path.is_file():
                return path, media_type
        return None

    def data_url(self, owner: str, image_id: str) -> str | None:
        """``owner``'s image ``image_id`` as a base64 ``data:`` URL; None if there is none."""
        found = self.open_image(owner, image_id)
        if found is None:
            return None
        path, media_type = found
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # deleted since it was found
            return None
        return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"

    def _folder(self, owner: str) -> Path:
        return self.directory / hashlib.sha256(owner.encode()).hexdigest()[:32]

    def _decode(self, data_url: str) -> bytes:
        header, comma, payload = data_url.partition(",")
        if not comma or header[:5].lower() != "data:":
            raise InvalidRequest("not a data: URL")
        media_type, *params = header[5:].split(";")
        if not params or params[-1].strip().lower() != "base64":
            raise InvalidRequest("the data: URL is not base64")
        declared = media_type.strip().lower()
        declared = _ALIASES.get(declared, declared)
        if declared not in EXTENSIONS:
            raise UnsupportedMediaType(
                f"image type {declared or 'unknown'!r} is not one of png, jpeg, gif, webp"
            )
        payload = "".join(payload.split())
        if len(payload) // 4 * 3 > self.max_bytes + 2:
            raise PayloadTooLarge(f"the image is larger than {self.max_bytes} bytes")
        if len(payload) % 4 == 1:
            raise InvalidRequest("the image is not valid base64")
        try:
            data = base64.b64decode(payload + "=" * (-len(payload) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("the image is not valid base64") from None
        if len(data) > self.max_bytes:
            raise PayloadTooLarge(f"the image is larger than {self.max_bytes} bytes")
        return data


def sniff_media_type(data: bytes) -> str | None:
    """The kept media type ``data`` begins like, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:2] == b"BM" and int.from_bytes(data[14:18], "little") in _BMP_HEADERS:
        return "image/bmp"
    return None


def own_image_id(url: str) -> str | None:
    """The id of the saved image ``url`` names on this server, or None. Matched by path
    (``.../v1/files/img_.../content`` or ``.../v1/files/img_...``, or the path alone),
    since a client reaches the server by any name: 127.0.0.1, a public host, a proxy."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https", "") or (not parts.scheme and parts.netloc):
        return None
    match = _OWN_PATH.fullmatch(parts.path)
    return match["id"] if match else None


async def inline_own_images(
    messages: Sequence[Message], owner: str, saver: ImageSaver
) -> tuple[Message, ...]:
    """``messages`` with each image whose URL is a saved image of this server
    (``own_image_id``) replaced by ``owner``'s image as a ``data:`` URL: an upstream
    cannot fetch this server's URLs (loopback, or behind the caller's key). An id that
    is not ``owner``'s (missing, or another owner's) is a 400 naming the URL."""
    out: list[Message] = []
    for message in messages:
        if any(isinstance(p, ImagePart) and own_image_id(p.url) for p in message.parts):
            parts = [await _inlined(p, owner, saver) for p in message.parts]
            message = replace(message, parts=tuple(parts))
        out.append(message)
    return tuple(out)


async def _inlined(part: Part, owner: str, saver: ImageSaver) -> Part:
    if not isinstance(part, ImagePart):
        return part
    image_id = own_image_id(part.url)
    if image_id is None:
        return part
    data_url = await asyncio.to_thread(saver.data_url, owner, image_id)
    if data_url is None:
        raise InvalidRequest(
            f"image_url {part.url[:300]!r} names no file of yours on this server",
            param="messages",
            code="file_not_found",
        )
    return ImagePart(data_url, part.detail)


def _write_atomically(path: Path, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def rewrite_markdown_images(text: str, saver: ImageSaver, owner: str) -> str:
    """``text`` with each Markdown image whose target is a base64 ``data:image/`` URL
    saved and pointed at its served URL (alt text and title kept). An image that cannot
    be saved (invalid, unsupported, too large, a disk error) stays as it was."""
    saved: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        data_url = match["url"]
        url = saved.get(data_url)
        if url is None:
            try:
                url = saver.save_data_url(owner, data_url).url
            except ParleyError as exc:
                log.info("inline image left as it is: %s", exc.message)
                return match[0]
            except OSError:
                log.warning("inline image left as it is: it could not be saved", exc_info=True)
                return match[0]
            saved[data_url] = url
        return f"![{match['alt']}]({url}{match['rest']})"

    return _MARKDOWN_IMAGE.sub(replace, text)
