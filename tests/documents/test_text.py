"""Decoding: the one decoder attachments and fetched pages share."""

from __future__ import annotations

import codecs

from parley.documents.text import decode_text


def test_a_body_cut_inside_a_character_is_still_utf8_only_when_it_may_be_cut() -> None:
    data = "café, déjà".encode()[:-1]
    assert decode_text(data, cut=True) == "café, déj\ufffd"
    assert decode_text(data) == data.decode("windows-1252")


def test_the_declared_charset_comes_first_then_a_byte_order_mark() -> None:
    assert decode_text("é".encode("latin-1"), "latin-1") == "é"
    assert decode_text(codecs.BOM_UTF16_LE + "hi".encode("utf-16-le")) == "hi"
    assert decode_text(codecs.BOM_UTF8 + b"hi", "latin-1") == "\u00ef\u00bb\u00bfhi"
