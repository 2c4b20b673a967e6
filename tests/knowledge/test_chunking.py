"""Chunking: packing whole blocks, headings, splitting long blocks (CJK and unbroken runs
too), overlap, pages and sections, the length bound, and that no text is lost."""

from __future__ import annotations

import itertools
import time
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.documents.types import Block, ExtractedDocument
from parley.knowledge.chunking import chunk
from parley.knowledge.types import Chunk


def document(*blocks: Block) -> ExtractedDocument:
    return ExtractedDocument(blocks)


def heading(text: str, *section: str) -> Block:
    return Block(text, section=(*section, text), heading=True)


def squash(text: str) -> str:
    return "".join(text.split())


def is_subsequence(needle: str, haystack: str) -> bool:
    rest = iter(haystack)
    return all(char in rest for char in needle)


def shared_edge(before: str, after: str, limit: int) -> int:
    """The length of the longest end of ``before`` that ``after`` begins with."""
    return max((k for k in range(1, limit + 1) if after.startswith(before[-k:])), default=0)


# --- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "overlap"), [(99, 0), (100, -1), (100, 50), (1000, 600)])
def test_bad_size_or_overlap(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="chunk"):
        chunk(document(Block("text")), size, overlap)


def test_smallest_valid_arguments() -> None:
    assert chunk(document(Block("text")), 100, 49) == [Chunk(0, "text")]


def test_a_document_without_text_has_no_chunks() -> None:
    assert chunk(document(Block("  \n "), Block(""))) == []


# --- packing --------------------------------------------------------------------------


def test_small_blocks_share_a_chunk() -> None:
    result = chunk(document(Block("one"), Block("  two\n"), Block("three")))
    assert result == [Chunk(0, "one\n\ntwo\n\nthree", page=None, section=None)]


def test_whole_blocks_are_packed_up_to_size() -> None:
    blocks = [Block(f"{i}" + "x" * 59) for i in range(5)]
    result = chunk(document(*blocks), size=150, overlap=0)
    assert [c.text for c in result] == [
        blocks[0].text + "\n\n" + blocks[1].text,
        blocks[2].text + "\n\n" + blocks[3].text,
        blocks[4].text,
    ]
    assert [c.ordinal for c in result] == [0, 1, 2]


def test_a_heading_starts_a_chunk_and_names_its_section() -> None:
    intro = Block("Intro. " * 40)
    result = chunk(
        document(
            intro,
            heading("Guide"),
            Block("Read this.", section=("Guide",)),
            heading("Install", "Guide"),
            Block("Run it.", section=("Guide", "Install")),
        ),
        size=1000,
    )
    assert result == [
        Chunk(0, intro.text.strip()),
        Chunk(1, "Guide\n\nRead this.\n\nInstall\n\nRun it.", section="Guide"),
    ]


def test_a_heading_joins_a_nearly_empty_chunk() -> None:
    result = chunk(
        document(Block("Draft 2."), heading("Setup"), Block("Do this.", section=("Setup",))),
        size=1000,
    )
    assert result == [Chunk(0, "Draft 2.\n\nSetup\n\nDo this.", section=None)]


def test_a_heading_sticks_to_the_text_after_it() -> None:
    full = Block("y" * 180)
    after = Block("Body text. " * 10, section=("Next",))
    result = chunk(document(full, heading("Next"), after), size=200, overlap=0)
    assert [c.text for c in result] == [full.text, "Next\n\n" + after.text.strip()]
    # and when the text after it is too long, the heading takes the start of it
    long_after = Block("Word " * 100, section=("Next",))
    result = chunk(document(full, heading("Next"), long_after), size=200, overlap=0)
    assert result[1].text.startswith("Next\n\nWord Word")
    assert all(not c.text.endswith("Next") for c in result)


def test_headings_at_the_end_stay_with_the_last_chunk() -> None:
    result = chunk(document(Block("Body " * 30), heading("Appendix")), size=1000)
    assert [c.text for c in result] == [("Body " * 30).strip() + "\n\nAppendix"]


def test_nested_sections_are_joined() -> None:
    block = Block("Text.", section=("Guide", "Install", "Linux"))
    assert chunk(document(block))[0].section == "Guide > Install > Linux"


def test_page_is_the_page_the_chunk_starts_on() -> None:
    result = chunk(
        document(
            Block("Alpha. " * 20, page=1),
            Block("Beta. " * 20, page=2),
            Block("Gamma sentence here. " * 50, page=3),
        ),
        size=400,
        overlap=80,
    )
    assert [c.page for c in result] == [1, 3, 3, 3]
    assert result[1].text.startswith("Gamma sentence here.")  # overlap: earlier pages


# --- splitting ------------------------------------------------------------------------


def test_a_long_block_is_split_at_sentence_ends() -> None:
    text = " ".join(f"Sentence number {i} ends here." for i in range(60))
    result = chunk(document(Block(text)), size=200, overlap=0)
    assert len(result) > 5
    assert all(c.text.endswith("ends here.") for c in result)
    assert " ".join(c.text for c in result) == text


def test_cjk_is_split_at_full_width_punctuation() -> None:
    text = "知识库检索是一个很好的功能！" * 40
    result = chunk(document(Block(text)), size=100, overlap=0)
    assert all(c.text.endswith("！") and len(c.text) <= 100 for c in result)
    assert "".join(c.text for c in result) == text


def test_lines_then_spaces_are_the_fallbacks() -> None:
    lines = "\n".join(f"row {i} with no full stop" for i in range(40))
    result = chunk(document(Block(lines)), size=120, overlap=0)
    assert all(c.text.endswith("full stop") for c in result)
    words = "word " * 200
    result = chunk(document(Block(words)), size=120, overlap=0)
    assert all(c.text.endswith("word") for c in result)


def test_an_unbroken_run_is_cut_hard_within_the_bound() -> None:
    result = chunk(document(Block("a" * 10_000)), size=100, overlap=40)
    assert len(result[0].text) == 100
    assert all(len(c.text) == 140 for c in result[1:-1])  # exactly size + overlap
    assert squash("".join(c.text[40:] if c.ordinal else c.text for c in result)) == "a" * 10_000


@pytest.mark.parametrize(
    "unit",
    [
        "e\u0301",  # e + combining acute
        "क्षि",  # Devanagari: a virama and a vowel sign
        "👩\u200d👩\u200d👧",  # a family joined by zero-width joiners
        "👍🏽",  # a skin-tone modifier
        "\u263a\ufe0f",  # a variation selector
    ],
)
def test_hard_cuts_keep_combining_marks_with_their_base(unit: str) -> None:
    result = chunk(document(Block(unit * 400)), size=101, overlap=17)
    assert len(result) > 3
    for piece in result:
        first = piece.text[0]
        assert unicodedata.category(first) not in ("Mn", "Mc", "Me")
        assert first not in "\u200d\ufe0f"
        assert not "\U0001f3fb" <= first <= "\U0001f3ff"
        assert piece.text[-1] != "\u200d"


# --- overlap --------------------------------------------------------------------------


def test_overlap_repeats_the_end_of_the_previous_chunk_from_a_word_start() -> None:
    text = " ".join(f"word{i}" for i in range(400))
    result = chunk(document(Block(text)), size=300, overlap=60)
    for before, after in itertools.pairwise(result):
        shared = shared_edge(before.text, after.text, 60)
        assert 30 <= shared <= 60
        assert before.text[-shared - 1] == " "


def test_overlap_prefers_a_sentence_start() -> None:
    text = "A sentence without much in it. " * 20 + "The last one, which has some more words."
    blocks = [Block(text), Block("Another block follows, and it is long enough. " * 20)]
    result = chunk(document(*blocks), size=700, overlap=100)
    assert result[1].text.startswith(
        "A sentence without much in it. The last one, which has some more words.\n\nAnother"
    )


def test_no_overlap_across_a_heading_or_a_section_change() -> None:
    result = chunk(
        document(
            Block("Long text. " * 60),
            heading("Next"),
            Block("More words. " * 60, section=("Next",)),
            Block("Other section. " * 60, section=("Elsewhere",)),
        ),
        size=500,
        overlap=100,
    )
    starts = [c.text.split(".")[0] for c in result]
    assert "Next\n\nMore words" in starts
    assert "Other section" in starts
    assert all(not c.text.startswith("Long text") for c in result[1:] if c.section == "Next")


def test_no_overlap_when_asked_for_none() -> None:
    text = "Plain words go on and on. " * 100
    result = chunk(document(Block(text)), size=200, overlap=0)
    assert " ".join(c.text for c in result) == text.strip()


# --- properties -----------------------------------------------------------------------

_CHARS = st.one_of(
    st.sampled_from([*"ab xy.!?\n\t", "知", "识", "。", "！", "？", "；", "\u3000"]),
    st.sampled_from(["\u0301", "\u200d", "\ufe0f", "🏽", "👍", "क", "्"]),
    st.characters(exclude_categories=["Cs"]),
)
_RUNS = st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["a", "知", "e\u0301", "ab ", "。"]),
    st.integers(0, 900),
)
_TEXT = st.lists(st.one_of(st.text(_CHARS, max_size=400), _RUNS), max_size=4).map("".join)
_BLOCK = st.builds(
    Block,
    text=_TEXT,
    page=st.one_of(st.none(), st.integers(1, 5)),
    section=st.sampled_from([(), ("A",), ("A", "B"), ("C",)]),
    heading=st.booleans(),
)


@st.composite
def _arguments(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(100, 600))
    return size, draw(st.integers(0, (size - 1) // 2))


@settings(max_examples=300, deadline=None)
@given(blocks=st.lists(_BLOCK, max_size=10), arguments=_arguments())
def test_chunk_properties(blocks: list[Block], arguments: tuple[int, int]) -> None:
    size, overlap = arguments
    result = chunk(ExtractedDocument(tuple(blocks)), size, overlap)
    whole = squash("".join(b.text for b in blocks))
    assert [c.ordinal for c in result] == list(range(len(result)))
    for piece in result:
        assert len(piece.text) <= size + overlap
        assert piece.text.strip()
        assert squash(piece.text) in whole  # a piece of the text, in order
        assert piece.page in {b.page for b in blocks}
        assert piece.section in {" > ".join(b.section) or None for b in blocks}
    # no text is lost: every non-whitespace character, in order
    assert is_subsequence(whole, squash("".join(c.text for c in result)))


# --- speed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "A sentence of ordinary prose for timing. " * 12,
        "知识库检索是一个很好的功能。" * 40,
        "x" * 10_000,
    ],
)
def test_five_megabytes_chunk_fast(text: str) -> None:
    blocks = tuple(Block(text) for _ in range(5_000_000 // len(text)))
    started = time.perf_counter()
    result = chunk(ExtractedDocument(blocks))
    elapsed = time.perf_counter() - started
    assert len(result) > 3000
    assert elapsed < 2.0  # typically ~0.1 s; generous for slow machines
