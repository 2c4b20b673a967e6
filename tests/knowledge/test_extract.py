"""Extraction: each format's blocks, pages, section paths and title; format detection;
text decoding; and the documents that are refused."""

from __future__ import annotations

import codecs
import io
import json
import time

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from parley.documents.blocks import ROW_BLOCK_CHARS
from parley.documents.json import JSON_BLOCK_CHARS
from parley.documents.types import Block, ExtractedDocument, UnreadableDocument
from parley.knowledge.extract import extract

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A small PDF with real text, one line per string (pypdf can only write blank
    pages), written by hand with exact cross-reference offsets. An empty list is a page
    without text."""
    count = len(pages)
    page_ids = [4 + 2 * i for i in range(count)]
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for page_id, lines in zip(page_ids, pages, strict=True):
        shown = " ".join(f"({line}) Tj 0 -20 Td" for line in lines)
        content = f"BT /F1 12 Tf 72 720 Td {shown} ET".encode() if lines else b""
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> " + f"/Contents {page_id + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    info = None
    if title is not None:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = len(objects)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    info_entry = f" /Info {info} 0 R" if info else ""
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info_entry} >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def encrypt(pdf: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx() -> bytes:
    document = docx.Document()
    document.add_paragraph("Annual Report", style="Title")
    document.add_paragraph("Prepared by the finance team.")
    document.add_heading("Results", level=1)
    document.add_paragraph("Revenue grew in every region.")
    document.add_heading("North", level=2)
    document.add_paragraph("North did best", style="List Bullet")
    table = document.add_table(rows=3, cols=2)
    for row, cells in enumerate([("Region", "Growth"), ("North", "12%"), ("South", "3%")]):
        for column, text in enumerate(cells):
            table.cell(row, column).text = text
    document.add_heading("Outlook", level=1)
    document.add_paragraph("Steady.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def texts(document: ExtractedDocument) -> list[str]:
    return [block.text for block in document.blocks]


# --- plain text and decoding ----------------------------------------------------------


def test_text_is_split_into_paragraphs() -> None:
    result = extract(b"First line\nstill first.\n\n\n  Second.  \r\n\r\nThird.\n", "notes.txt")
    assert result == ExtractedDocument(
        (Block("First line\nstill first."), Block("Second."), Block("Third.")),
        title=None,
        pages=None,
    )


@pytest.mark.parametrize(
    "data",
    [
        codecs.BOM_UTF8 + "café 知识".encode(),
        codecs.BOM_UTF16_LE + "café 知识".encode("utf-16-le"),
        codecs.BOM_UTF16_BE + "café 知识".encode("utf-16-be"),
        "café 知识".encode(),
    ],
)
def test_text_encodings(data: bytes) -> None:
    assert texts(extract(data, "a.txt")) == ["café 知识"]


def test_bad_bytes_never_crash() -> None:
    result = extract(b"caf\xe9 au lait \x81\xff ok", "a.txt")
    assert texts(result)[0].startswith("café au lait")
    assert texts(result)[0].endswith("ok")


def test_declared_charset_is_used() -> None:
    data = "Привет, мир".encode("cp1251")
    assert texts(extract(data, "a.txt", "text/plain; charset=windows-1251")) == ["Привет, мир"]


def test_lone_surrogates_and_nul_are_made_storable() -> None:
    result = extract(b'{"a": "x\\ud800y\\u0000z"}', "a.json")
    assert texts(result) == ["a: x\ufffdyz"]
    texts(result)[0].encode("utf-8")  # storable


# --- Markdown -------------------------------------------------------------------------


MARKDOWN = """\
# Guide

Intro text.

## Install

Run the installer.

```sh
# not a heading
make install
```

### Linux ###
Use apt.

Setext Top
==========

Under setext.

Sub part
--------
- one
- two
"""


def test_markdown_headings_make_the_section_path() -> None:
    result = extract(MARKDOWN.encode(), "guide.md")
    assert result.title == "Guide"
    assert [(b.text, b.section, b.heading) for b in result.blocks] == [
        ("Guide", ("Guide",), True),
        ("Intro text.", ("Guide",), False),
        ("Install", ("Guide", "Install"), True),
        ("Run the installer.", ("Guide", "Install"), False),
        ("# not a heading\nmake install", ("Guide", "Install"), False),
        ("Linux", ("Guide", "Install", "Linux"), True),
        ("Use apt.", ("Guide", "Install", "Linux"), False),
        ("Setext Top", ("Setext Top",), True),
        ("Under setext.", ("Setext Top",), False),
        ("Sub part", ("Setext Top", "Sub part"), True),
        ("- one\n- two", ("Setext Top", "Sub part"), False),
    ]
    assert all(b.page is None for b in result.blocks)


def test_markdown_edge_cases() -> None:
    text = "#hashtag is text\n\n- item\n---\n\n```\nunclosed # fence\n"
    result = extract(text.encode(), "x.markdown")
    assert result.title is None
    assert texts(result) == ["#hashtag is text", "- item\n---", "unclosed # fence"]
    assert all(b.section == () for b in result.blocks)


# --- HTML -----------------------------------------------------------------------------


HTML = """\
<!doctype html>
<html><head><title>The  Handbook</title><style>p { color: red }</style>
<script>var secret = 1;</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<h1>Handbook</h1>
<p>Welcome to <b>the</b> handbook.<br>Second line.</p>
<div>Loose text in a div</div>
<h2>Tools</h2>
<ul><li>Hammer<ul><li>Claw</li></ul></li><li>Saw</li></ul>
<table><tr><th>Tool</th><th>Price</th></tr><tr><td>Hammer</td><td>10</td></tr></table>
<pre>line 1
    indented</pre>
<h2>Care</h2><p>Oil them.</p><!-- a comment -->
<script>alert("no")</script>
</body></html>
"""


def test_html_blocks_sections_and_title() -> None:
    result = extract(HTML.encode(), "page.html")
    assert result.title == "The Handbook"
    assert [(b.text, b.section) for b in result.blocks] == [
        ("Handbook", ("Handbook",)),
        ("Welcome to the handbook.\nSecond line.", ("Handbook",)),
        ("Loose text in a div", ("Handbook",)),
        ("Tools", ("Handbook", "Tools")),
        ("- Hammer\n  - Claw\n- Saw", ("Handbook", "Tools")),
        ("Tool | Price\nHammer | 10", ("Handbook", "Tools")),
        ("line 1\n    indented", ("Handbook", "Tools")),
        ("Care", ("Handbook", "Care")),
        ("Oil them.", ("Handbook", "Care")),
    ]
    joined = "\n".join(texts(result))
    assert "secret" not in joined
    assert "alert" not in joined
    assert "About" not in joined
    assert "comment" not in joined


def test_html_title_falls_back_to_the_first_h1_and_meta_charset_is_read() -> None:
    html = '<html><head><meta charset="windows-1252"></head><body><h1>Caf\xe9</h1></body></html>'
    result = extract(html.encode("cp1252"), "x.htm")
    assert result.title == "Café"


def test_deeply_nested_html_does_not_exhaust_the_stack() -> None:
    html = "<html><body>" + "<div>" * 3000 + "deep" + "</div>" * 3000 + "</body></html>"
    assert texts(extract(html.encode(), "deep.html")) == ["deep"]


def test_html_without_markup_is_text() -> None:
    assert texts(extract(b"just words", "a.html")) == ["just words"]


# --- PDF ------------------------------------------------------------------------------


def test_pdf_blocks_carry_their_page() -> None:
    data = make_pdf([["Hello PDF", "first page"], [], ["Third page text"]], title="My Paper")
    result = extract(data, "paper.pdf")
    assert result.pages == 3
    assert result.title == "My Paper"
    assert [(b.page, b.text.split()) for b in result.blocks] == [
        (1, ["Hello", "PDF", "first", "page"]),
        (3, ["Third", "page", "text"]),
    ]
    assert all(b.section == () and not b.heading for b in result.blocks)


def test_pdf_without_text_is_refused() -> None:
    with pytest.raises(UnreadableDocument, match=r"no extractable text \(scanned images\?\)"):
        extract(make_pdf([[], []]), "scan.pdf")


def test_encrypted_pdf_is_refused_unless_the_password_is_empty() -> None:
    pdf = make_pdf([["Secret text"]])
    with pytest.raises(UnreadableDocument, match="encrypted and needs a password"):
        extract(encrypt(pdf, "secret"), "locked.pdf")
    assert texts(extract(encrypt(pdf, ""), "open.pdf")) == ["Secret text"]


def test_corrupt_pdf_is_refused() -> None:
    with pytest.raises(UnreadableDocument, match="not a readable PDF"):
        extract(b"%PDF-1.4\nthis is not a pdf at all", "bad.pdf")


def test_a_pdf_over_the_page_limit_is_refused_saying_so() -> None:
    data = make_pdf([["one"], ["two"], ["three"]])
    assert len(extract(data, "ok.pdf", max_pdf_pages=3).blocks) == 3
    with pytest.raises(UnreadableDocument, match=r"has 3 pages; at most 2 .*max_pdf_pages"):
        extract(data, "long.pdf", max_pdf_pages=2)


def test_a_pdf_page_with_too_much_content_is_skipped() -> None:
    data = make_pdf([["first"], ["x" * 3000], ["third"]])
    result = extract(data, "r.pdf", max_page_content_bytes=1000)
    assert result.pages == 3
    assert [(b.page, b.text) for b in result.blocks] == [(1, "first"), (3, "third")]


# --- DOCX -----------------------------------------------------------------------------


def test_docx_headings_lists_and_tables() -> None:
    result = extract(make_docx(), "report.docx")
    assert result.title == "Annual Report"
    assert result.pages is None
    assert [(b.text, b.section, b.heading) for b in result.blocks] == [
        ("Annual Report", (), False),
        ("Prepared by the finance team.", (), False),
        ("Results", ("Results",), True),
        ("Revenue grew in every region.", ("Results",), False),
        ("North", ("Results", "North"), True),
        ("- North did best", ("Results", "North"), False),
        ("Region | Growth\nNorth | 12%\nSouth | 3%", ("Results", "North"), False),
        ("Outlook", ("Outlook",), True),
        ("Steady.", ("Outlook",), False),
    ]


def test_corrupt_docx_is_refused() -> None:
    with pytest.raises(UnreadableDocument, match="not a readable DOCX"):
        extract(b"PK\x03\x04 not really a zip", "broken.docx")


# --- CSV ------------------------------------------------------------------------------


def test_csv_rows_are_grouped_with_the_header_repeated() -> None:
    rows = ["id,name,comment"] + [f'{i},name {i},"a comment, with a comma"' for i in range(200)]
    result = extract("\n".join(rows).encode(), "data.csv")
    assert len(result.blocks) > 1
    seen: list[str] = []
    for block in result.blocks:
        lines = block.text.split("\n")
        assert lines[0] == "id | name | comment"
        assert len(block.text) <= ROW_BLOCK_CHARS
        seen.extend(lines[1:])
    assert seen == [f"{i} | name {i} | a comment, with a comma" for i in range(200)]


def test_csv_delimiter_is_sniffed_and_tsv_uses_tabs() -> None:
    assert texts(extract(b"a;b\n1;2\n", "semi.csv")) == ["a | b\n1 | 2"]
    assert texts(extract(b"a\tb\n1\t2\n", "tabs.tsv")) == ["a | b\n1 | 2"]


def test_csv_that_the_csv_module_rejects_is_read_as_text() -> None:
    huge = "x" * 200_000  # over the csv module's field size limit
    result = extract(f'h\n"{huge}"\n'.encode(), "big.csv")
    assert "".join(texts(result)).count("x") == 200_000


# --- JSON -----------------------------------------------------------------------------


def test_json_object_is_grouped_by_top_level_key() -> None:
    value = {"name": "Parley", "version": 3, "tags": ["chat", "rag"]}
    result = extract(json.dumps(value).encode(), "meta.json")
    assert texts(result) == ["name: Parley", "version: 3", 'tags: ["chat", "rag"]']


def test_json_array_items_and_large_values_are_split_with_their_path() -> None:
    users = [{"name": f"user {i}", "bio": "word " * 30} for i in range(20)]
    result = extract(json.dumps({"users": users}).encode(), "users.json")
    assert len(result.blocks) == 20
    assert result.blocks[3].text == (
        'users[3]: {\n  "name": "user 3",\n  "bio": "' + "word " * 30 + '"\n}'
    )
    assert all(len(b.text) <= JSON_BLOCK_CHARS for b in result.blocks)
    items = extract(
        b'[1, {"a": "b"}, {"long": [' + b", ".join([b"1234567890"] * 10) + b"]}]", "l.json"
    )
    assert texts(items) == [
        "[0]: 1",
        '[1]: {"a": "b"}',
        '[2]: {\n  "long": [\n' + ",\n".join(["    1234567890"] * 10) + "\n  ]\n}",
    ]


@pytest.mark.parametrize("data", [b"{not json", b'{"a": 1', b"[" * 100_000])
def test_invalid_json_is_refused(data: bytes) -> None:
    with pytest.raises(UnreadableDocument, match="JSON"):
        extract(data, "bad.json")


# --- format detection -----------------------------------------------------------------


def test_extension_comes_before_content_type() -> None:
    result = extract(b"# Title\n\nBody", "readme.md", "text/plain")
    assert result.blocks[0].heading


def test_content_type_is_used_without_a_known_extension() -> None:
    result = extract(b"# Title\n\nBody", "upload", "text/markdown; charset=utf-8")
    assert result.title == "Title"
    assert texts(extract(b'{"a": 1}', "upload.bin2", "application/ld+json")) == ["a: 1"]


def test_bytes_are_sniffed_last() -> None:
    assert extract(make_pdf([["Sniffed"]]), "upload", None).pages == 1
    assert extract(make_docx(), "upload", "application/octet-stream").title == "Annual Report"
    assert extract(b"<!doctype html><h1>Hi</h1>", "upload").title == "Hi"
    assert texts(extract(b'{"k": "v"}', "upload")) == ["k: v"]
    assert texts(extract(b"plain words", "notes.rst")) == ["plain words"]


@pytest.mark.parametrize(
    ("data", "filename", "content_type", "shown"),
    [
        (b"MZ\x90\x00\x03\x00\x00\x00", "setup.exe", None, ".exe"),
        (b"plain text, but the name says image", "photo.png", None, ".png"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "upload", "image/png", "image/png"),
        (b"\x00\x01\x02\x03binary", "blob", None, "unknown"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00", "old", None, "unknown"),
    ],
)
def test_unsupported_types_are_refused(
    data: bytes, filename: str, content_type: str | None, shown: str
) -> None:
    with pytest.raises(UnreadableDocument) as caught:
        extract(data, filename, content_type)
    assert str(caught.value) == (
        f"unsupported file type: {shown}; supported: .txt, .md, .html, .pdf, .docx, .csv, .json"
    )
    assert caught.value.status == 422


def test_binary_bytes_under_a_text_name_are_refused() -> None:
    with pytest.raises(UnreadableDocument, match="binary data, not text"):
        extract(b"\x89PNG\r\n\x1a\n\x00\x00\x00", "image.txt")


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (b"", "empty.txt"),
        (b"  \n\n \t ", "blank.md"),
        (b"<html><body><script>x()</script></body></html>", "empty.html"),
        (b"{}", "empty.json"),
        (b"\n\n", "empty.csv"),
    ],
)
def test_empty_documents_are_refused(data: bytes, filename: str) -> None:
    with pytest.raises(UnreadableDocument, match="no text"):
        extract(data, filename)


# --- speed ----------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["big.txt", "big.md"])
def test_five_megabytes_of_text_extract_fast(filename: str) -> None:
    section = "## Part\n\n" + ("A sentence of ordinary prose for timing. " * 12 + "\n\n") * 10
    data = (section * (5_000_000 // len(section) + 1)).encode()
    started = time.perf_counter()
    result = extract(data, filename)
    elapsed = time.perf_counter() - started
    assert len(result.blocks) > 10_000
    assert elapsed < 2.0  # typically ~0.1 s; generous for slow machines
