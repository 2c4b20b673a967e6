"""PDF attachments as text: one text per page, the page and content limits, and the
clear errors."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfWriter

from parley.documents.attached import read_document
from parley.documents.types import DocumentError, DocumentLimits
from tests.documents.samples import make_pdf


def test_pdf_text_per_page() -> None:
    result = read_document("r.pdf", make_pdf(["Hello PDF", "Second page"]), "application/pdf")
    assert result.kind == "pdf"
    assert result.pages == ["Hello PDF", "Second page"]
    assert "--- Page 1 ---\nHello PDF" in result.text
    assert "--- Page 2 ---\nSecond page" in result.text
    assert not result.truncated


def test_pdf_page_limit_truncates() -> None:
    data = make_pdf(["one", "two", "three"])
    result = read_document("r.pdf", data, None, limits=DocumentLimits(max_pages=2))
    assert result.pages == ["one", "two"]
    assert result.truncated


def test_a_pdf_page_with_too_much_content_is_skipped() -> None:
    data = make_pdf(["short", "x" * 5000, "after"])
    limits = DocumentLimits(max_page_content_bytes=1000)
    result = read_document("r.pdf", data, None, limits=limits)
    assert result.pages is not None
    assert result.pages[0] == "short"
    assert result.pages[1].startswith("[page 2 skipped: its content is 50")
    assert result.pages[2] == "after"
    assert not result.truncated


def test_pdf_reading_stops_when_the_pages_content_passes_its_bound() -> None:
    data = make_pdf(["a" * 300, "b" * 300, "c" * 300])
    result = read_document("r.pdf", data, None, limits=DocumentLimits(max_content_bytes=700))
    assert result.pages == ["a" * 300, "b" * 300]
    assert result.truncated
    assert "(The document is longer" not in result.text  # that is the prompt's line


def test_encrypted_pdf_is_a_clear_error() -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=72, height=72)
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(DocumentError) as caught:
        read_document("locked.pdf", buffer.getvalue(), "application/pdf")
    assert caught.value.reason == "encrypted"
    assert "password" in caught.value.message


def test_corrupt_pdf() -> None:
    with pytest.raises(DocumentError) as caught:
        read_document("bad.pdf", b"%PDF-1.4\nthis is not a pdf at all", "application/pdf")
    assert caught.value.reason == "corrupt"
    assert caught.value.name == "bad.pdf"
