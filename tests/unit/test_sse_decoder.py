"""The upstream SSE decoder: the same events whatever the byte splits and line endings."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from parley.providers.sse import SSEDecoder

STREAM = (
    b": comment\r\n"
    b'data: {"a": "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x8e\x89"}\r\n\r\n'
    b"event: delta\ndata: line one\ndata: line two\n\n"
    b"id: 3\rretry: 5\rdata:no-space\r\r"
    b"unknown: field\ndata: [DONE]\n\n"
)
EXPECTED = [
    ("message", '{"a": "héllo 世界 🎉"}'),
    ("delta", "line one\nline two"),
    ("message", "no-space"),
    ("message", "[DONE]"),
]


def decode(pieces: list[bytes]) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events + list(decoder.flush())


def test_whole_stream() -> None:
    assert decode([STREAM]) == EXPECTED


def test_every_single_split_position() -> None:
    for cut in range(len(STREAM) + 1):
        assert decode([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_byte_by_byte() -> None:
    assert decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_splits(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    assert decode([STREAM[a:b] for a, b in itertools.pairwise(points)]) == EXPECTED


def test_final_event_without_blank_line_is_dispatched() -> None:
    assert decode([b"data: last"]) == [("message", "last")]


def test_empty_data_lines_without_data_dispatch_nothing() -> None:
    assert decode([b"event: x\n\n: only a comment\n\n"]) == []
