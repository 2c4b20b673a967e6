"""The sensitive-content filter end to end: the official ``openai`` client against a real
Parley server (filter enabled in its config) in front of the loopback mock upstream,
which streams its reply in chunks that hypothesis chooses."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.interceptors.builtins.sensitive import SensitiveFilter
from parley.settings.interceptors import SensitiveSettings
from parley.testing.mock_openai import MockOpenAI

WORDS = ["hunter2", "机密", "bad", "badly"]
PHONE = r"\d{3}-\d{4}"
REPLY = "hunter2 is badly 机密, call 555-1234!"
THOUGHT = "is 机密 bad?"
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me."}]


def filter_config(word_file: Path, **options: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "word_files": [str(word_file)],
        "patterns": [PHONE],
        "max_pattern_chars": 8,
        **options,
    }


def start(factory: pytest.TempPathFactory, upstream: MockOpenAI, **options: Any) -> ParleyServer:
    data_dir = factory.mktemp("sensitive")
    word_file = data_dir / "words.txt"
    word_file.write_text("# test words\n" + "\n".join(WORDS) + "\n", encoding="utf-8")
    config = server_config(
        upstream,
        interceptors={
            "sensitive": filter_config(word_file, **options),
            "audit": {"flush_seconds": 0.1},
        },
    )
    return ParleyServer(data_dir, config).start()


@pytest.fixture(scope="module")
def replacing(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    server = start(tmp_path_factory, upstream)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rejecting(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    server = start(tmp_path_factory, upstream, on_request="reject")
    yield server
    server.stop()


def client_of(server: ParleyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0)


def redacted(text: str) -> str:
    """What the whole text becomes, by the same rules."""
    rules = SensitiveSettings(words=WORDS, patterns=[PHONE], max_pattern_chars=8)
    return SensitiveFilter(rules).redactor.redact(text).text


def assert_clean(pieces: list[str]) -> None:
    for piece in [*pieces, "".join(pieces)]:
        assert not any(word in piece.lower() for word in WORDS), piece
        assert "555-1234" not in piece


def cut(text: str, points: set[int]) -> list[str]:
    bounds = [0, *sorted(points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def split_points(text: str) -> st.SearchStrategy[set[int]]:
    return st.sets(st.integers(1, len(text) - 1))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text_cuts=split_points(REPLY), thought_cuts=split_points(THOUGHT))
def test_a_streamed_reply_is_redacted_however_it_is_split(
    replacing: ParleyServer, upstream: MockOpenAI, text_cuts: set[int], thought_cuts: set[int]
) -> None:
    upstream.queue_text(*cut(REPLY, text_cuts), reasoning=cut(THOUGHT, thought_cuts))
    with client_of(replacing) as client:
        stream = client.chat.completions.create(
            model="fast",
            messages=ASK,
            stream=True,
        )
        chunks = [c for c in stream if c.choices]
    texts = [c.choices[0].delta.content or "" for c in chunks]
    thoughts = [
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks
    ]
    assert "".join(texts) == redacted(REPLY) == "*** is *** ***, call ***!"
    assert "".join(thoughts) == redacted(THOUGHT) == "is *** ***?"
    assert_clean(texts)
    assert_clean(thoughts)


def test_a_whole_reply_is_redacted(replacing: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("bad", "ly said, hun", "ter2")
    with client_of(replacing) as client:
        reply = client.chat.completions.create(model="fast", messages=ASK)
    assert reply.choices[0].message.content == "*** said, ***"


def test_request_text_is_replaced_and_detections_recorded(
    replacing: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_text("ok, ba", "d")
    with client_of(replacing) as client:
        reply = client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "my password is HUNTER2"}],
        )
    assert reply.choices[0].message.content == "ok, ***"
    assert upstream.requests[-1]["messages"][-1]["content"] == "my password is ***"
    query = (
        "SELECT name, outcome, detail FROM audit_log WHERE kind = 'detection' "
        "AND message_id = ? ORDER BY name"
    )
    message_id = reply.id.removeprefix("chatcmpl-")
    deadline = time.monotonic() + 10
    rows: list[Any] = []
    while time.monotonic() < deadline and len(rows) < 2:
        time.sleep(0.1)
        rows = db_rows(replacing, query, message_id)
    found = [(row["name"], row["outcome"], row["detail"]) for row in rows]
    assert found == [
        ("word:words.txt:2", "replaced", '{"where":"request","count":1}'),
        ("word:words.txt:4", "redacted", '{"where":"response","count":1}'),
    ]


@pytest.mark.parametrize("streaming", [False, True])
def test_reject_refuses_blocked_content_with_a_400(
    rejecting: ParleyServer, upstream: MockOpenAI, streaming: bool
) -> None:
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "is 机密 ok?"}]
    with client_of(rejecting) as client, pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fast", messages=ask, stream=streaming)
    error = caught.value
    assert error.status_code == 400
    assert error.code == "content_rejected"
    assert "blocked content (rule: word list words.txt line 3)" in error.message
    assert upstream.requests == []  # nothing went upstream
