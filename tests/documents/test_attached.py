"""Attachments as text: text, CSV and JSON as they are, the size and character caps,
and ``FilePart`` data decoded."""

from __future__ import annotations

import base64

import pytest

from parley.documents.attached import decode_file_part, read_document, read_file_part
from parley.documents.types import DocumentError, DocumentLimits
from parley.messages import FilePart
from tests.documents.samples import make_pdf


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
