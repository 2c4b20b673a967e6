"""PDF (pypdf): opening (an empty user password is tried), the cost of a page's
content, and the two renderings.

- As an attachment (``pdf_text``): one text per page read, joined under
  ``--- Page n ---`` lines, within ``DocumentLimits``: ``max_pages`` pages, a page whose
  content streams decompress to more than ``max_page_content_bytes`` skipped with a note
  in its place, reading stopped when all the pages' content passes
  ``max_content_bytes`` or the text ``max_chars``.
- For a knowledge base (``read_pdf``): one or more blocks per page, ``page`` 1-based,
  the title from the metadata. A PDF of more than ``max_pages`` pages
  (``knowledge.max_pdf_pages``) is refused, as is one with no text at all (a scan); a
  page whose content decompresses to more than ``max_page_content_bytes`` is skipped,
  as a damaged one is.

Both refuse a PDF that needs a password.

What does not belong here: choosing the format (``kinds.py``), the limits themselves
(``types.DocumentLimits``, the settings).
"""

from __future__ import annotations

import io

from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError
from pypdf.generic import ArrayObject, StreamObject

from parley.documents.blocks import finish, text_blocks
from parley.documents.text import clean
from parley.documents.types import (
    Block,
    DocumentError,
    DocumentLimits,
    ExtractedDocument,
    UnreadableDocument,
)

MAX_PDF_PAGES = 2_000
"""Pages a PDF may have (``knowledge.max_pdf_pages``)."""
MAX_PAGE_CONTENT = DocumentLimits().max_page_content_bytes
"""What a page's content may decompress to before it is skipped."""


def open_pdf(name: str, data: bytes) -> PdfReader:
    """A reader of the PDF, decrypted when its password is empty; ``DocumentError`` when
    it needs one."""
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:  # many "encrypted" PDFs have an empty password and only restrict editing
            opened = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except (DependencyError, FileNotDecryptedError, NotImplementedError):
            opened = False
        if not opened:
            raise DocumentError(
                f"{name} is an encrypted PDF that needs a password", reason="encrypted", name=name
            )
    return reader


def page_content_bytes(page: PageObject) -> int:
    """What the page's content streams decompress to (pypdf keeps the result, so reading
    the page after this does not decompress again)."""
    contents = page.get("/Contents")
    if contents is None:
        return 0
    resolved = contents.get_object()
    streams = resolved if isinstance(resolved, ArrayObject) else [resolved]
    size = 0
    for stream in streams:
        item = stream.get_object()
        if isinstance(item, StreamObject):
            size += len(item.get_data())
    return size


# --- as an attachment -----------------------------------------------------------------


def pdf_text(name: str, data: bytes, limits: DocumentLimits) -> tuple[str, list[str], bool]:
    """The text, the text of each page read, and whether reading stopped early."""
    try:
        reader = open_pdf(name, data)
        pages: list[str] = []
        total = content = 0
        truncated = len(reader.pages) > limits.max_pages
        for number, page in enumerate(reader.pages[: limits.max_pages], 1):
            size = page_content_bytes(page)
            if size > limits.max_page_content_bytes:
                pages.append(f"[page {number} skipped: its content is {size} bytes]")
                continue
            content += size
            if content > limits.max_content_bytes:
                truncated = True
                break
            text = (page.extract_text() or "").replace("\x00", "").strip()
            pages.append(text)
            total += len(text)
            if total > limits.max_chars:
                truncated = True
                break
    except DocumentError:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files
        raise DocumentError(
            f"{name} is not a readable PDF ({type(exc).__name__}: {exc})",
            reason="corrupt",
            name=name,
        ) from exc
    text = "\n\n".join(f"--- Page {n} ---\n{page}" for n, page in enumerate(pages, 1))
    return text, pages, truncated


# --- for a knowledge base -------------------------------------------------------------


def read_pdf(
    data: bytes, *, max_pages: int = MAX_PDF_PAGES, max_page_content_bytes: int = MAX_PAGE_CONTENT
) -> ExtractedDocument:
    """Refused past ``max_pages`` pages; a page whose content streams decompress to more
    than ``max_page_content_bytes`` is skipped, as a damaged one is."""
    try:
        reader = open_pdf("the PDF", data)
        metadata = reader.metadata
        title = metadata.title if metadata is not None else None
        pages = list(reader.pages)
    except DocumentError as exc:  # the one open_pdf raises: a password is needed
        raise UnreadableDocument("the PDF is encrypted and needs a password") from exc
    except Exception as exc:  # pypdf raises many kinds on damaged files
        raise UnreadableDocument(f"the file is not a readable PDF ({type(exc).__name__})") from exc
    if len(pages) > max_pages:
        raise UnreadableDocument(
            f"the PDF has {len(pages)} pages; at most {max_pages} are read "
            "(knowledge.max_pdf_pages)"
        )
    blocks: list[Block] = []
    for number, page in enumerate(pages, 1):
        try:
            if page_content_bytes(page) > max_page_content_bytes:
                continue
            text = page.extract_text() or ""
        except Exception:  # one damaged page does not lose the others
            continue
        blocks.extend(text_blocks(clean(text), section=(), page=number))
    if not blocks:
        raise UnreadableDocument("the PDF has no extractable text (scanned images?)")
    return finish(blocks, title if isinstance(title, str) else None, pages=len(pages))
