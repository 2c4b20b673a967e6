"""DOCX attachments as text: headings, lists and tables in order, the unpacked-size
limit, and a walk that stops at ``max_chars``."""

from __future__ import annotations

import io

import docx
import pytest
from docx.text.paragraph import Paragraph

from parley.documents.attached import read_document
from parley.documents.kinds import DOCX_MEDIA_TYPE
from parley.documents.types import DocumentError, DocumentLimits
from tests.documents.samples import make_docx


def test_docx_keeps_headings_lists_and_tables_in_order() -> None:
    result = read_document("r.docx", make_docx(), DOCX_MEDIA_TYPE)
    assert result.kind == "docx"
    assert result.pages is None
    assert result.text.split("\n\n") == [
        "# Quarterly report",
        "Revenue grew in every region.",
        "- North did best",
        "| Region | Growth |\n| --- | --- |\n| North | 12% |",
        "The end.",
    ]


def test_docx_unpacking_too_much_is_refused() -> None:
    with pytest.raises(DocumentError) as caught:
        read_document(
            "bomb.docx", make_docx(), None, limits=DocumentLimits(max_unpacked_bytes=1000)
        )
    assert caught.value.reason == "too_large"


def test_a_docx_is_walked_only_as_far_as_max_chars(monkeypatch: pytest.MonkeyPatch) -> None:
    document = docx.Document()
    for number in range(2000):
        document.add_paragraph(f"paragraph {number}")
    document.add_paragraph("")
    buffer = io.BytesIO()
    document.save(buffer)
    read: list[int] = []
    text_of = Paragraph.text.fget
    assert text_of is not None
    monkeypatch.setattr(Paragraph, "text", property(lambda p: read.append(1) or text_of(p)))
    result = read_document(
        "long.docx", buffer.getvalue(), None, limits=DocumentLimits(max_chars=200)
    )
    assert result.truncated
    assert result.text.startswith("paragraph 0\n\nparagraph 1\n\n")
    assert len(result.text) == 200
    assert len(read) < 30  # not 2,001


def test_empty_docx_paragraphs_count_towards_the_walk() -> None:
    document = docx.Document()
    for _ in range(500):
        document.add_paragraph("")
    document.add_paragraph("the end")
    buffer = io.BytesIO()
    document.save(buffer)
    result = read_document(
        "blank.docx", buffer.getvalue(), None, limits=DocumentLimits(max_chars=100)
    )
    assert result.truncated
    assert result.text == ""
