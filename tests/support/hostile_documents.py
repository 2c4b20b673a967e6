"""Small documents that are expensive to read, made in memory for the tests that attack
the server with them (issue 17). Only the server's reader processes ever read them."""

from __future__ import annotations

import io
import zipfile
import zlib


def shared_stream_pdf(pages: int, operators: int) -> bytes:
    """``pages`` pages that all draw one compressed content stream of ``operators``
    empty text-show operators: a few KB on disk, a fifth of a second or more of pypdf
    per page (each page parses the whole stream again), and no text at all."""
    body = b"BT /F1 9 Tf 40 800 Td\n" + b"() Tj\n" * operators + b"ET"
    stream = zlib.compress(body, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, below
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    first = len(objects) + 1
    kids = b" ".join(b"%d 0 R" % (first + n) for n in range(pages))
    objects[1] = b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    objects += [page] * pages
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, item in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + item + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def paragraphs_docx(count: int) -> bytes:
    """A DOCX of ``count`` one-letter paragraphs: 40 bytes of XML each, compressed to
    almost nothing (2.3 million: 230 KB on the wire, 92 MB unpacked, over a GB parsed)."""
    xml = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w='
        b'"http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
        + b"<w:p><w:r><w:t>a</w:t></w:r></w:p>" * count
        + b"</w:body></w:document>"
    )
    types = (
        b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats'
        b'.org/package/2006/content-types"><Default Extension="rels" ContentType="application'
        b'/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" '
        b'ContentType="application/xml"/><Override PartName="/word/document.xml" '
        b'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.'
        b'document.main+xml"/></Types>'
    )
    rels = (
        b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
        b'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http'
        b'://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
        b'Target="word/document.xml"/></Relationships>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", types)
        archive.writestr("_rels/.rels", rels)
        archive.writestr("word/document.xml", xml)
    return out.getvalue()
