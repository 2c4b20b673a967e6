"""Search terms: how text becomes the ``terms`` column that the lexical index (SQLite FTS5,
PostgreSQL tsvector) reads, and how a query becomes a match expression.

Both databases split on anything that is not a letter or digit, which leaves a run of
Chinese or Japanese text as one huge "word". So the terms are made here, the same way for
the index and the query (Rikkahub's fallback): words of letters and digits, lowercased
and NFKC-normalised; and every run of CJK characters as its overlapping character pairs
(a single character alone). "知识库检索" becomes "知识 识库 库检 检索".

A query keeps terms of two or more characters (a single CJK character stays when it is
the whole run), at most ``MAX_QUERY_TERMS`` distinct ones, and matches chunks holding any
of them; ranking (BM25 / ts_rank) puts chunks holding more and rarer terms first.
``content_terms``, what knowledge search asks for, also leaves out the query's stop words
(``stopwords.py``: "how", "does", 什么, 的...), unless nothing else is left; a Chinese
stop word splits its run, so no pair straddles it. The index keeps every term.

What does not belong here: the SQL that searches (``index.py``).
"""

from __future__ import annotations

import re
import unicodedata

from parley.knowledge import stopwords

MAX_QUERY_TERMS = 64

# Han, Hiragana, Katakana, Hangul syllables and the CJK compatibility block
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]")


_CJK_CHAR = re.compile(rf"[{_CJK}]")
_LETTERS = re.compile(rf"[^\W\d_{_CJK}]")
CJK_SCRIPT_SHARE = 0.2
"""``script``: a text is CJK when its CJK characters are at least this share of its
letters (a Chinese document quoting English names stays CJK: a Chinese character holds
about as much as a whole English word)."""
LATIN, CJK = 0, 1
"""``script``'s values, as stored in ``kb_chunks.script``."""


def script(text: str) -> int:
    """``CJK`` or ``LATIN`` (any other script, and text without letters): what the
    vector search groups chunks by for a cross-lingual model (``vectors.py``)."""
    if text.isascii():
        return LATIN
    cjk = len(_CJK_CHAR.findall(text))
    if not cjk:
        return LATIN
    others = len(_LETTERS.findall(text))
    return CJK if cjk >= CJK_SCRIPT_SHARE * (cjk + others) else LATIN


_ASCII_SPACES = (
    bytes(c if chr(c).isascii() and chr(c).isalnum() else 32 for c in range(128))
    .decode("ascii")
    .lower()
)
_ASCII_TABLE = str.maketrans("".join(chr(c) for c in range(128)), _ASCII_SPACES)
"""ASCII letters and digits lowercased, everything else a space: the same terms as the
general path for ASCII text, at about a seventh of its cost (most documents)."""


def _tokens(text: str) -> list[str]:
    if text.isascii():
        return text.translate(_ASCII_TABLE).split()
    normal = unicodedata.normalize("NFKC", text).lower()
    terms: list[str] = []
    for match in _TOKEN.finditer(normal):
        token = match.group()
        if _CJK_RUN.match(token):
            if len(token) == 1:
                terms.append(token)
            else:
                terms.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            terms.append(token)
    return terms


def index_terms(text: str) -> str:
    """The ``terms`` column for ``text``: its terms, space-separated, in order."""
    return " ".join(_tokens(text))


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query worth searching for, in order of first use."""
    seen: dict[str, None] = {}
    for term in _tokens(text):
        if len(term) >= 2 or _CJK_RUN.match(term):
            seen.setdefault(term, None)
            if len(seen) >= MAX_QUERY_TERMS:
                break
    return list(seen)


def content_terms(text: str) -> list[str]:
    """``query_terms`` without the query's stop words (``stopwords.py``); a query of stop
    words only keeps its terms. A Chinese stop word is cut out of its run before the run
    is cut into pairs, and a single character left between stop words is not a term
    (the index has it only as a run of its own)."""
    seen: dict[str, None] = {}
    for term in _content_tokens(text):
        if len(term) >= 2 or _CJK_RUN.match(term):
            seen.setdefault(term, None)
            if len(seen) >= MAX_QUERY_TERMS:
                break
    return list(seen) or query_terms(text)


def _content_tokens(text: str) -> list[str]:
    if text.isascii():
        return [t for t in text.translate(_ASCII_TABLE).split() if t not in stopwords.ENGLISH]
    normal = unicodedata.normalize("NFKC", text).lower()
    terms: list[str] = []
    for match in _TOKEN.finditer(normal):
        token = match.group()
        if not _CJK_RUN.match(token):
            if token not in stopwords.ENGLISH:
                terms.append(token)
        elif len(token) == 1:
            if token not in stopwords.CHINESE:
                terms.append(token)
        else:
            for piece in stopwords.split_chinese(token):
                terms.extend(piece[i : i + 2] for i in range(len(piece) - 1))
    return terms


def is_cjk(term: str) -> bool:
    """Whether ``term`` is a CJK character pair (or a single CJK character)."""
    return bool(_CJK_RUN.match(term))


def fts5_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression for any of ``terms`` (each quoted: no operator syntax
    from the user's text reaches FTS5)."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def tsquery_expression(terms: list[str]) -> str:
    """A PostgreSQL ``to_tsquery('simple', ...)`` expression for any of ``terms``."""
    return " | ".join("'" + term.replace("'", "''").replace("\\", "\\\\") + "'" for term in terms)
