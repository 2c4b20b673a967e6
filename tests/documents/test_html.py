"""HTML attachments as Markdown-like text."""

from __future__ import annotations

from parley.documents.attached import read_document


def test_html_becomes_markdown_without_scripts() -> None:
    html = b"<html><head><title>T</title><script>evil()</script></head><body><h1>Hi</h1>"
    html += b"<p>A <b>bold</b> move.</p></body></html>"
    result = read_document("page.html", html, "text/html; charset=utf-8")
    assert result.kind == "html"
    assert "# Hi" in result.text
    assert "**bold**" in result.text
    assert "evil" not in result.text
