"""Fitting a chat to the local model's context, and the worker's frames, without a model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.providers.local.fitting import fit_context
from parley.providers.local.protocol import (
    Cancel,
    Finished,
    Generate,
    Load,
    LoadFailed,
    Piece,
    ProtocolError,
    Ready,
    decode_reply,
    decode_request,
    encode,
)


class Words:
    """A tokenizer where each word is a token and a prompt costs its words plus 4 per
    message: easy to reason about, shaped like the real one."""

    def tokens(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        return sum(len(m["content"].split()) + 4 for m in messages)

    def truncate(self, text: str, limit: int, *, keep_end: bool) -> str:
        words = text.split()
        return " ".join(words[-limit:] if keep_end else words[:limit])


def _chat(turns: int, words: int = 10) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "be kind"}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"q{turn} " + "w " * words})
        messages.append({"role": "assistant", "content": f"a{turn} " + "w " * words})
    messages.append({"role": "user", "content": "final question"})
    return messages


def test_a_chat_that_fits_is_sent_whole() -> None:
    messages = _chat(2)
    fitted, total = fit_context(Words(), messages, 1000)

    assert fitted == messages
    assert total == Words().prompt_tokens(messages)


def test_the_system_message_and_the_newest_turns_are_kept() -> None:
    messages = _chat(30)
    fitted, total = fit_context(Words(), messages, 100)

    assert fitted[0] == messages[0]
    assert fitted[-1] == messages[-1]
    assert fitted[1:] == messages[len(messages) - len(fitted) + 1 :]  # a suffix, in order
    assert 2 < len(fitted) < len(messages)
    assert total <= 100


def test_one_message_too_long_keeps_its_end() -> None:
    messages = [{"role": "user", "content": "start " + "x " * 500 + "the end"}]
    fitted, total = fit_context(Words(), messages, 50)

    assert total <= 50
    assert fitted[0]["content"].endswith("the end")
    assert not fitted[0]["content"].startswith("start")


def test_a_long_system_message_keeps_its_start() -> None:
    messages = [
        {"role": "system", "content": "rules " + "y " * 500},
        {"role": "user", "content": "hello"},
    ]
    fitted, total = fit_context(Words(), messages, 60)

    assert fitted[0]["content"].startswith("rules")
    assert len(fitted[0]["content"].split()) <= 30
    assert fitted[-1] == {"role": "user", "content": "hello"}
    assert total <= 60


@given(
    st.lists(st.integers(min_value=0, max_value=80), min_size=1, max_size=30),
    st.integers(min_value=16, max_value=400),
)
def test_the_fitted_prompt_never_exceeds_the_budget_and_ends_with_the_last_message(
    sizes: list[int], budget: int
) -> None:
    roles = ["user", "assistant"]
    messages = [
        {"role": roles[i % 2], "content": " ".join(f"m{i}" for _ in range(n))}
        for i, n in enumerate(sizes)
    ]
    fitted, total = fit_context(Words(), messages, budget)

    assert total == Words().prompt_tokens(fitted)
    assert total <= budget
    assert fitted[-1]["role"] == messages[-1]["role"]
    last_words = messages[-1]["content"].split()
    kept_words = fitted[-1]["content"].split()
    assert kept_words == last_words[len(last_words) - len(kept_words) :]


# --- frames ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        Load("/m.gguf", 2048, 2),
        Generate(3, [{"role": "user", "content": 'é\n"x"'}], {"temperature": 0.5}, 7),
        Cancel(3),
    ],
)
def test_requests_round_trip(frame: Load | Generate | Cancel) -> None:
    line = encode(frame)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_request(line) == frame


@pytest.mark.parametrize(
    "frame",
    [
        Ready("m", 2048, "CPU : AVX2 = 1", 0.2, 0.01, 42),
        LoadFailed("bad"),
        Piece(1, "text\nwith a newline"),
        Finished(1, "length", 10, 5, 3, cancelled=True),
    ],
)
def test_replies_round_trip(frame: Ready | LoadFailed | Piece | Finished) -> None:
    assert decode_reply(encode(frame)) == frame


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b"[1, 2]\n",
        b'{"kind": "ready"}\n',  # fields missing
        b'{"kind": "piece", "id": 1, "text": "x", "extra": 1}\n',
        b'{"kind": "load", "path": "x", "context_tokens": 1, "threads": 1}\n',  # a request
        b'{"text": "x"}\n',
    ],
)
def test_lines_that_are_not_replies_are_refused(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_reply(line)
