"""Documents as text: detection, each kind, limits and the clear errors."""

from __future__ import annotations

import base64
import io
import zipfile

import docx
import pytest
from docx.text.paragraph import Paragraph
from pypdf import PdfWriter

from parley.messages import FilePart
from parley.transforms.documents import (
    DOCX_MEDIA_TYPE,
    DocumentError,
    DocumentLimits,
    decode_file_part,
    detect_kind,
    read_document,
    read_file_part,
)


def make_pdf(pages: list[str]) -> bytes:
    """A small PDF with real text (pypdf can only write blank pages), written by hand with
    exact cross-reference offsets."""
    count = len(pages)
    page_ids = [4 + 2 * i for i in range(count)]
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for page_id, text in zip(page_ids, pages, strict=True):
        content = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> " + f"/Contents {page_id + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Quarterly report", level=1)
    document.add_paragraph("Revenue grew in every region.")
    document.add_paragraph("North did best", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).text = "Growth"
    table.cell(1, 0).text = "North"
    table.cell(1, 1).text = "12%"
    document.add_paragraph("The end.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


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


def test_html_becomes_markdown_without_scripts() -> None:
    html = b"<html><head><title>T</title><script>evil()</script></head><body><h1>Hi</h1>"
    html += b"<p>A <b>bold</b> move.</p></body></html>"
    result = read_document("page.html", html, "text/html; charset=utf-8")
    assert result.kind == "html"
    assert "# Hi" in result.text
    assert "**bold**" in result.text
    assert "evil" not in result.text


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


def test_text_and_csv_and_json_are_returned_as_text() -> None:
    assert read_document("a.csv", b"a,b\r\n1,2\r\n", None).text == "a,b\n1,2\n"
    assert read_document("a.json", b'{"k": "v"}', None).text == '{"k": "v"}'
    latin = read_document("a.txt", "café".encode("windows-1252"), None)
    assert latin.text == "café"


def test_binary_claiming_to_be_text_is_corrupt() -> None:
    with pytest.raises(DocumentError) as caught:
        read_document("a.txt", b"\x00\x01\x02binary", "text/plain")
    assert caught.value.reason == "corrupt"


def test_size_and_character_caps() -> None:
    with pytest.raises(DocumentError) as caught:
        read_document("big.txt", b"x" * 101, None, limits=DocumentLimits(max_bytes=100))
    assert caught.value.reason == "too_large"
    assert (caught.value.status, caught.value.code) == (413, "document_too_large")
    cut = read_document("long.txt", b"y" * 50, None, limits=DocumentLimits(max_chars=10))
    assert cut.text == "y" * 10
    assert cut.truncated


def test_decode_file_part_forms() -> None:
    payload = b"hello world"
    b64 = base64.b64encode(payload).decode()
    assert decode_file_part(FilePart("a", f"data:text/plain;base64,{b64}")) == payload
    assert decode_file_part(FilePart("a", b64)) == payload
    assert decode_file_part(FilePart("a", b64.rstrip("="))) == payload
    assert decode_file_part(FilePart("a", "data:text/plain,hello%20world")) == payload
    assert decode_file_part(FilePart("a", "data:;base64," + b64[:4] + "\n" + b64[4:])) == payload


def test_decode_file_part_errors() -> None:
    with pytest.raises(DocumentError) as caught:
        decode_file_part(FilePart("a.txt", "not base64 at all!"))
    assert caught.value.reason == "corrupt"
    big = base64.b64encode(b"z" * 2000).decode()
    with pytest.raises(DocumentError) as caught:
        decode_file_part(FilePart("a.txt", big), max_bytes=1000)
    assert caught.value.reason == "too_large"


def test_read_file_part_uses_the_data_url_media_type() -> None:
    b64 = base64.b64encode(make_pdf(["From a data URL"])).decode()
    result = read_file_part(FilePart("upload", f"data:application/pdf;base64,{b64}"))
    assert result.kind == "pdf"
    assert "From a data URL" in result.text


def test_zip_without_word_document_is_unsupported() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "hi")
    with pytest.raises(DocumentError) as caught:
        read_document("files", buffer.getvalue(), None)
    assert caught.value.reason == "unsupported"
