"""HTML (BeautifulSoup): the charset, and the two renderings.

The markup is decoded as BeautifulSoup's ``UnicodeDammit`` decodes HTML: the declared
charset (a Content-Type's), else a byte-order mark or the page's own ``<meta charset>``
/ XML declaration, else its guess; an XML declaration is dropped, and text without a
``<`` is not markup at all.

- As text (``html_to_text``; ``web_fetch`` and attachments): Markdown-like text through
  markdownify (title apart, headings, paragraphs, lists, tables, links made absolute
  against the page's URL or ``<base>``, images as ``[image: alt]``), after scripts,
  styles, navigation, forms and hidden elements are dropped.
- For a knowledge base (``read_html``): blocks in document order, walked without
  recursion. Scripts, styles, navigation, form controls and hidden elements are dropped
  (a ``<form>`` itself is kept: some sites wrap the whole page in one); ``h1``-``h6``
  make the section path; paragraphs, lists, ``pre`` and loose text are blocks; tables
  are row groups. The title is ``<title>``, else the first ``h1``.

What does not belong here: fetching pages (``tools/builtins/web.py``), telling HTML from
other bytes (``kinds.HTML_START``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from bs4 import BeautifulSoup, Tag, UnicodeDammit
from bs4.element import NavigableString, PreformattedString
from markdownify import ATX, MarkdownConverter

from parley.documents.blocks import Sections, finish, row_blocks, squash, text_blocks
from parley.documents.text import clean, decode, decode_text
from parley.documents.types import Block, ExtractedDocument

_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
_DROPPED = (
    "script, style, noscript, template, nav, svg, canvas, iframe, object, embed, form, "
    "button, select, input, textarea, dialog, [hidden], [aria-hidden=true], "
    "[role=navigation], [style*='display:none'], [style*='display: none'], "
    "[style*='visibility:hidden'], [style*='visibility: hidden']"
)
_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
_CONVERTER = MarkdownConverter(
    heading_style=ATX,
    bullets="-",
    escape_asterisks=False,
    escape_underscores=False,
    escape_misc=False,
)
# read_html drops these names (and hidden elements, by ``_dropped``): as ``_DROPPED`` but
# a <form> is kept (some sites wrap the whole page in one) and the head goes
_BLOCKS_DROPPED = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "nav",
        "svg",
        "canvas",
        "iframe",
        "object",
        "embed",
        "button",
        "select",
        "input",
        "textarea",
        "dialog",
        "head",
    }
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_INLINE = frozenset(
    {
        "a",
        "abbr",
        "acronym",
        "b",
        "bdi",
        "bdo",
        "big",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "kbd",
        "label",
        "mark",
        "nobr",
        "q",
        "rp",
        "rt",
        "ruby",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
    }
)


def _unicode_markup(data: bytes, charset: str | None) -> str | None:
    """``data`` decoded as the module docstring says; None when no encoding fits."""
    dammit = UnicodeDammit(
        data, known_definite_encodings=[charset] if charset else [], is_html=True
    )
    return dammit.unicode_markup


# --- as text --------------------------------------------------------------------------


def html_to_text(body: bytes, *, charset: str | None, base_url: str) -> tuple[str | None, str]:
    """(title, Markdown-like text) of an HTML document."""
    markup = _unicode_markup(body, charset)
    if markup is None:
        markup = decode_text(body, cut=True)
    markup = _XML_DECLARATION.sub("", markup, count=1)
    if "<" not in markup:
        return None, markup.strip()
    soup = BeautifulSoup(markup, "html.parser")
    title = " ".join(soup.title.get_text(" ").split()) if soup.title else None
    base = soup.find("base", href=True)
    if isinstance(base, Tag) and isinstance(base.get("href"), str):
        base_url = urljoin(base_url, str(base["href"]))
    for element in soup.select(_DROPPED):
        if not element.decomposed:
            element.decompose()
    _inline_images_and_links(soup, base_url)
    heads: list[Tag | None] = [soup.head, soup.title]  # the title is in the header lines
    for head in heads:
        if head is not None and not head.decomposed:
            head.decompose()
    text = _CONVERTER.convert_soup(soup.body or soup)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return title or None, text.strip()


def _inline_images_and_links(soup: BeautifulSoup, base_url: str) -> None:
    """Images become their alt text (or nothing); links get absolute URLs, or lose a
    ``href`` of another scheme (``javascript:``)."""
    for image in soup.select("img"):
        alt = image.get("alt")
        if isinstance(alt, str) and alt.strip():
            image.replace_with(f"[image: {alt.strip()}]")
        else:
            image.decompose()
    for link in soup.select("a[href]"):
        href = link.get("href")
        absolute = urljoin(base_url, href.strip()) if isinstance(href, str) else ""
        if urlsplit(absolute).scheme in _LINK_SCHEMES:
            link["href"] = absolute
        else:
            del link["href"]


# --- for a knowledge base -------------------------------------------------------------


def read_html(data: bytes, charset: str | None) -> ExtractedDocument:
    markup = _unicode_markup(data, charset)
    markup = clean(markup if markup is not None else decode(data))
    markup = _XML_DECLARATION.sub("", markup, count=1)
    if "<" not in markup:  # not markup at all
        return finish(text_blocks(markup, section=()), title=None)
    soup = BeautifulSoup(markup, "html.parser")
    title = squash(soup.title.get_text()) if soup.title else None
    for element in soup.find_all(_dropped):
        if not element.decomposed:
            element.decompose()
    walker = _HtmlWalker()
    walker.walk(soup)
    return finish(walker.blocks, title or walker.first_h1)


def _dropped(tag: Tag) -> bool:
    """Whether ``tag`` is not content: scripts, styles, navigation, form controls,
    hidden elements. (Found this way rather than by a CSS selector, which is many times
    slower on a large page.)"""
    if tag.name in _BLOCKS_DROPPED:
        return True
    attrs = tag.attrs
    if not attrs:
        return False
    if "hidden" in attrs or attrs.get("aria-hidden") == "true" or attrs.get("role") == "navigation":
        return True
    style = attrs.get("style")
    if isinstance(style, str):
        style = style.replace(" ", "").lower()
        return "display:none" in style or "visibility:hidden" in style
    return False


class _HtmlWalker:
    """Blocks of an HTML tree in document order, walked without recursion (so deeply
    nested pages cannot exhaust the stack)."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._sections = Sections()
        self._inline: list[str] = []
        self.first_h1: str | None = None

    def walk(self, root: Tag) -> None:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self._flush()
            elif isinstance(node, NavigableString):
                if not isinstance(node, PreformattedString):  # comments, doctype, CDATA
                    self._inline.append(str(node))
            elif isinstance(node, Tag):
                self._element(node, stack)
        self._flush()

    def _element(self, node: Tag, stack: list[tuple[Any, bool]]) -> None:
        name = node.name
        if name == "br":
            self._inline.append("\n")
        elif name == "img":
            alt = node.get("alt")
            if isinstance(alt, str) and alt.strip():
                self._inline.append(f" [image: {alt.strip()}] ")
        elif name in _HEADINGS:
            self._flush()
            text = squash(_html_text(node))
            if text:
                section = self._sections.enter(_HEADINGS[name], text)
                if name == "h1" and self.first_h1 is None:
                    self.first_h1 = text
                self.blocks.append(Block(text, section=section, heading=True))
        elif name in ("ul", "ol"):
            self._flush()
            self._add(_html_list(node))
        elif name == "table":
            self._flush()
            self.blocks.extend(row_blocks(_html_rows(node), self._sections.path))
        elif name == "pre":
            self._flush()
            self._add(node.get_text().strip("\n"))
        else:
            if name not in _INLINE:  # a block element: its text is a paragraph
                self._flush()
                stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.contents))

    def _add(self, text: str) -> None:
        if text.strip():
            self.blocks.append(Block(text, section=self._sections.path))

    def _flush(self) -> None:
        if not self._inline:
            return
        lines = (squash(line) for line in "".join(self._inline).split("\n"))
        self._inline.clear()
        self._add("\n".join(line for line in lines if line))


def _html_text(node: Tag, skip: frozenset[str] = frozenset()) -> str:
    """The text under ``node``, leaving out elements named in ``skip``; ``<br>`` is a
    line break."""
    parts: list[str] = []
    stack: list[Any] = list(reversed(node.contents))
    while stack:
        item = stack.pop()
        if isinstance(item, NavigableString):
            if not isinstance(item, PreformattedString):
                parts.append(str(item))
        elif isinstance(item, Tag) and item.name not in skip:
            if item.name == "br":
                parts.append("\n")
            else:
                stack.extend(reversed(item.contents))
    return "".join(parts)


def _html_list(node: Tag) -> str:
    lines: list[str] = []
    for item in node.find_all("li"):
        depth, parent = 0, item.parent
        while parent is not None and parent is not node:
            depth += parent.name in ("ul", "ol")
            parent = parent.parent
        text = squash(_html_text(item, skip=frozenset({"ul", "ol"})))
        if text:
            lines.append("  " * depth + "- " + text)
    return "\n".join(lines)


def _html_rows(table: Tag) -> list[str]:
    rows: list[str] = []
    for row in table.find_all("tr"):
        if row.find_parent("table") is not table:  # a nested table's row
            continue
        cells = [squash(_html_text(cell)) for cell in row.find_all(["td", "th"], recursive=False)]
        rows.append(" | ".join(cells))
    return rows
