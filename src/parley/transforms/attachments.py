"""Attachments the model cannot read itself: documents as prompt text, images by OCR.

**Document as prompt** (Rikkahub's ``DocumentAsPromptTransformer``). Each ``FilePart``
is replaced, in place, by a text part::

    ## user sent a file: report.pdf
    <content>
    ```
    --- Page 1 ---
    ...
    ```
    </content>

The fence is longer than any run of backticks in the text, so a document cannot end it.
A document that cannot be read becomes a one-line note saying why (and a note in the
report); it never fails the request: not when it is corrupt or unsupported, not when
reading it runs past its deadline or crashes the process reading it. Only a server too
busy to read it at all fails the request (``Overloaded``, 503 or 429 with Retry-After:
the client may send it again). Texts, and lasting failures, are cached by content, so
the same file in a long conversation is read once per process, not once per turn.

The reading itself is a ``DocumentReader``'s: the server's reads in supervised reader
processes (``parley.extraction``); ``InlineDocumentReader`` reads in the caller's
thread, for tests and tools.

**OCR** (Rikkahub's ``OcrTransformer``). When the model cannot read images (no
``vision`` in the context's capabilities; or always, with ``only_without_vision=False``)
each ``ImagePart`` is replaced by an ``<image_file_ocr>`` block holding what the
configured ``OcrEngine`` read, marked as a description of the image and not the user's
words. Without an engine the images are left as they are and the report says so. A
failed reading becomes ``[image: OCR failed]``.

What does not belong here: turning bytes into text (``parley.documents``), the processes
that do it for the server (``parley.extraction``), running an OCR model (an
``OcrEngine`` given to ``build_pipeline``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from parley.documents.attached import read_file_part
from parley.documents.types import Document, DocumentError, DocumentLimits
from parley.errors import Overloaded
from parley.messages import FilePart, ImagePart, Message, Part, TextPart
from parley.transforms.protocol import CAPABILITY_VISION, TransformContext, with_parts

log = logging.getLogger(__name__)

_BACKTICKS = re.compile(r"`{3,}")


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A small least-recently-used map."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        if self.size <= 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class DocumentReader(Protocol):
    async def read(self, part: FilePart, limits: DocumentLimits, owner: str) -> Document:
        """The text of ``part`` (read for ``owner``) within ``limits``; ``DocumentError``
        when it cannot be read, ``Overloaded`` when there is no room to read it now."""
        ...


class InlineDocumentReader:
    """Reads in the calling thread, blocking it: for tests and tools, never the server."""

    async def read(self, part: FilePart, limits: DocumentLimits, owner: str) -> Document:
        return read_file_part(part, limits=limits)


@dataclass(frozen=True, slots=True)
class DocumentPromptConfig:
    """``enabled``: turn attached documents into text; ``limits``: what one document may
    cost; ``cache_size``: how many document texts are kept (by content hash)."""

    enabled: bool = True
    limits: DocumentLimits = field(default_factory=DocumentLimits)
    cache_size: int = 32


class DocumentAsPromptTransformer:
    name = "document_as_prompt"

    def __init__(self, config: DocumentPromptConfig, reader: DocumentReader) -> None:
        self.config = config
        self._reader = reader
        self._cache: _Lru[str, Document | str] = _Lru(config.cache_size)
        """A document's text, or why it cannot be read (a timeout or a crash is not
        kept: it may not happen again)."""

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        result: list[Message] = []
        for message in messages:
            if any(isinstance(p, FilePart) for p in message.parts):
                parts: list[Part] = []
                for part in message.parts:
                    if isinstance(part, FilePart):
                        part = TextPart(await self._prompt(part, context))
                    parts.append(part)
                message = with_parts(message, parts)
            result.append(message)
        return result

    async def _prompt(self, part: FilePart, context: TransformContext) -> str:
        name = " ".join(part.name.split())[:200] or "document"
        key = hashlib.sha256(f"{part.media_type}\x00{part.data}".encode()).hexdigest()
        outcome = self._cache.get(key)
        if outcome is None:
            lasting = True
            try:
                outcome = await self._reader.read(part, self.config.limits, context.owner)
            except Overloaded:
                raise  # no room to read it now: the request fails, to be sent again
            except DocumentError as exc:
                outcome, lasting = exc.message, exc.lasting
            except Exception:  # a reader bug must not fail the request either
                log.exception("reading the attached file %s failed", name)
                outcome = f"{name} could not be read (internal error)"
            if lasting:
                self._cache.put(key, outcome)
        if isinstance(outcome, str):
            context.report.note(f"the attached file {name} could not be read: {outcome}")
            return f"## user sent a file: {name}\n[The file could not be read: {outcome}]"
        return document_prompt(name, outcome)


def document_prompt(name: str, document: Document) -> str:
    """The prompt text for one readable document."""
    text = document.text.strip() or "(no extractable text: it may be a scanned image)"
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=2)
    fence = "`" * max(3, longest + 1)
    lines = [f"## user sent a file: {name}", "<content>", fence, text, fence, "</content>"]
    if document.truncated:
        lines.append("(The document is longer: only its beginning is shown.)")
    return "\n".join(lines)


class OcrEngine(Protocol):
    """Reads the text in an image (an http(s) or ``data:`` URL) and describes it."""

    async def read(self, image_url: str) -> str: ...


@dataclass(frozen=True, slots=True)
class OcrConfig:
    """``enabled``: replace images by their OCR text for models that cannot see;
    ``only_without_vision``: leave images alone when the model reads them itself;
    ``cache_size``: how many readings are kept (by image URL hash)."""

    enabled: bool = True
    only_without_vision: bool = True
    cache_size: int = 64


class OcrTransformer:
    name = "ocr"

    def __init__(self, config: OcrConfig, engine: OcrEngine | None) -> None:
        self.config = config
        self.engine = engine
        self._cache: _Lru[str, str] = _Lru(config.cache_size)

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        if self.config.only_without_vision and CAPABILITY_VISION in context.capabilities:
            return messages
        if not any(isinstance(p, ImagePart) for m in messages for p in m.parts):
            return messages
        engine = self.engine
        if engine is None:
            context.report.note(
                "images were sent to a model that may not read images, and no OCR engine "
                "is configured to describe them"
            )
            return messages
        result: list[Message] = []
        for message in messages:
            if any(isinstance(p, ImagePart) for p in message.parts):
                parts: list[Part] = []
                for part in message.parts:
                    if isinstance(part, ImagePart):
                        part = TextPart(await self._read(engine, part.url, context))
                    parts.append(part)
                message = with_parts(message, parts)
            result.append(message)
        return result

    async def _read(self, engine: OcrEngine, url: str, context: TransformContext) -> str:
        key = hashlib.sha256(url.encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            text = (await engine.read(url)).strip()
        except Exception as exc:  # an OCR failure must not fail the request
            log.warning("OCR failed: %s", exc, exc_info=True)
            context.report.note(f"OCR failed for an image: {exc}")
            return "[image: OCR failed]"
        block = (
            f"<image_file_ocr>\n{text}\n</image_file_ocr>\n"
            "* The image_file_ocr tag contains a description of an image that the user "
            "uploaded to you, not the user's prompt."
        )
        self._cache.put(key, block)
        return block
