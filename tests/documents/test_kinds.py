"""Attachment kinds: from the media type, the extension, the bytes; and the types
refused."""

from __future__ import annotations

import io
import zipfile

import pytest

from parley.documents.attached import read_document
from parley.documents.kinds import detect_kind
from parley.documents.types import DocumentError
from tests.documents.samples import make_docx, make_pdf


@pytest.mark.parametrize(
    ("name", "data", "media_type", "kind"),
    [
        ("notes.txt", b"plain", "text/plain", "text"),
        ("notes.md", b"# Title", "application/octet-stream", "markdown"),
        ("data.csv", b"a,b\n1,2\n", None, "csv"),
        ("data.json", b'{"a": 1}', None, "json"),
        ("weird.bin", b'{"a": [1, 2]}', None, "json"),
        ("weird.bin", b"just words", None, "text"),
        ("noext", b"<!DOCTYPE html><html><body>x</body></html>", None, "html"),
        ("noext", make_pdf(["x"]), None, "pdf"),
        ("noext", make_docx(), "application/octet-stream", "docx"),
        ("script.py", b"print(1)", "text/x-python", "text"),
        # the media type wins over the extension
        ("notes.txt", b"# Title", "text/markdown", "markdown"),
    ],
)
def test_detection(name: str, data: bytes, media_type: str | None, kind: str) -> None:
    assert detect_kind(name, data, media_type) == kind


@pytest.mark.parametrize(
    ("name", "data", "media_type"),
    [
        ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image/png"),
        ("old.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 64, None),
        ("archive.zip", b"PK\x03\x04" + b"\x00" * 64, None),
    ],
)
def test_unsupported_types(name: str, data: bytes, media_type: str | None) -> None:
    with pytest.raises(DocumentError) as caught:
        read_document(name, data, media_type)
    assert caught.value.reason == "unsupported"
    assert name in caught.value.message


def test_zip_without_word_document_is_unsupported() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "hi")
    with pytest.raises(DocumentError) as caught:
        read_document("files", buffer.getvalue(), None)
    assert caught.value.reason == "unsupported"
