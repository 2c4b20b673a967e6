"""Cheaper by default for stateless clients (issue 18), through a real server and the
official ``openai`` SDK.

The rule: the server spends on a conversation unasked (a title, follow-up suggestions,
finishing a reply whose client left) only when a user will see it again, that is when
the client named it (``conversation_id``; Chatchat's route with its own ids). A
stateless request (no ``conversation_id``: the client keeps its own history) costs the
one upstream call it asked for, is still stored, and its client's Stop stops the spend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

TITLE_PROMPT = "Write a short title"
SUGGESTIONS_PROMPT = "follow-up messages the user might send"


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    """The defaults: titles and suggestions on (the harness turns them off unless asked),
    no fast model (the chat's own writes them), ``server.on_disconnect`` unset (auto)."""
    config = server_config(upstream, chat={"generate_titles": True, "generate_suggestions": True})
    with ParleyServer(tmp_path_factory.mktemp("stateless"), config) as parley:
        yield parley


@pytest.fixture(scope="module")
def continuing(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, server={"on_disconnect": "continue"})
    with ParleyServer(tmp_path_factory.mktemp("continuing"), config) as parley:
        yield parley


def sdk(server: ParleyServer, path: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}{path}", api_key="sk-x", max_retries=0)


def conversation(server: ParleyServer, cid: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/conversations/{cid}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def cid_of(reply: Any) -> str:
    cid: str = (reply.model_extra or {})["parley"]["conversation_id"]
    return cid


def prompts(upstream: MockOpenAI, needle: str) -> list[str]:
    """The prompts of the upstream requests that contain ``needle`` (title or
    suggestions calls of the server's own)."""
    found = []
    for request in upstream.requests:
        text = str(request["messages"][-1]["content"])
        if needle in text:
            found.append(text)
    return found


def route_slowly(upstream: MockOpenAI, needle: str, text: str, seconds: float) -> None:
    """Like ``route_text``, answering only after ``seconds``."""
    upstream._routed.append((needle, Reply(frames=text_frames([text]), first_delay=seconds)))


def test_a_stateless_request_costs_one_upstream_call(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    # answers for a title and suggestions of this conversation (their prompts quote it
    # as "User: ..."): had the server asked, they would succeed and show
    upstream.route_text("User: What is the capital of France?", "Capital of France")
    upstream.route_text("User: What is the capital of France?", '["And Germany?"]')
    upstream.queue_text("Paris.")
    reply = sdk(server).chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "What is the capital of France?"}]
    )
    assert reply.choices[0].message.content == "Paris."
    stateless = cid_of(reply)

    # The settle signal, and the proof that this setup does write titles: a
    # conversation the client names (Chatchat's route, its own id) gets both, after the
    # stateless request's reply ended (its background work, had there been any, began
    # when that reply ended, before this request was sent).
    upstream.route_text("short title", "Rivers of Spain")
    upstream.route_text("follow-up", '["Which is longest?"]')
    upstream.queue_text("The Tagus, the Ebro ...")
    named = sdk(server, "/chat").chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "Name the rivers of Spain"}],
        extra_body={"conversation_id": "chatchat-rivers"},
    )
    named_id = cid_of(named)
    wait_for(lambda: conversation(server, named_id)["title"] == "Rivers of Spain")
    wait_for(lambda: conversation(server, named_id)["suggestions"] == ["Which is longest?"])

    titles, suggestions = (prompts(upstream, TITLE_PROMPT), prompts(upstream, SUGGESTIONS_PROMPT))
    assert len(titles) == len(suggestions) == 1  # the named conversation's, not the stateless
    assert "rivers of Spain" in titles[0]
    assert "rivers of Spain" in suggestions[0]
    assert not any("France" in p for p in titles + suggestions)
    assert len(upstream.requests) == 4  # stateless turn; named turn, its title, suggestions

    # the stateless conversation is stored all the same, with its first line as title
    stored = conversation(server, stateless)
    assert stored["title"] == "What is the capital of France?"
    assert stored["suggestions"] == []
    assert [(m["role"], m["status"], m["content"]) for m in stored["messages"]] == [
        ("user", "complete", "What is the capital of France?"),
        ("assistant", "complete", "Paris."),
    ]
    assert stored["messages"][1]["usage"]["output_tokens"] > 0  # its usage too


def test_naming_the_conversation_gets_a_title_and_suggestions_off_the_critical_path(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    client = sdk(server)
    upstream.queue_text("Blue.")
    first = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "name a colour"}]
    )
    cid = cid_of(first)
    # the title and the suggestions answer slowly: the reply must not wait for them
    route_slowly(upstream, "short title", "Naming colours", 1.5)
    route_slowly(upstream, "follow-up", '["Another one?", "Why blue?"]', 1.5)
    upstream.queue_text("Green", ".")
    started = time.monotonic()
    stream = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "and another?"}],
        stream=True,
        extra_body={"conversation_id": cid},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    took = time.monotonic() - started
    assert text == "Green."
    assert took < 1.0, f"the stream ended after {took:.2f} s: it waited for the title"
    assert conversation(server, cid)["title"] == "name a colour"  # not yet the generated one
    # they run after the reply, as soon as it ended
    wait_for(lambda: len(prompts(upstream, TITLE_PROMPT)) == 1, timeout=1.0)
    wait_for(lambda: conversation(server, cid)["title"] == "Naming colours")
    wait_for(lambda: conversation(server, cid)["suggestions"] == ["Another one?", "Why blue?"])
    assert len(prompts(upstream, SUGGESTIONS_PROMPT)) == 1
    # the stateless first turn asked for neither: one call for it, then three
    assert len(upstream.requests) == 4


def _stream_and_leave(
    server: ParleyServer, messages: list[dict[str, str]], **extra: Any
) -> tuple[str, str]:
    """Start a streamed reply with the SDK, read its first words, then close the
    connection (a client's Stop). Returns the conversation id and the text seen."""
    stream = sdk(server).chat.completions.create(
        model="fast", messages=messages, stream=True, **extra
    )
    seen, cid = "", ""
    for chunk in stream:
        cid = cid_of(chunk)
        if chunk.choices:
            seen += chunk.choices[0].delta.content or ""
        if seen.count(" ") >= 3:
            break
    stream.close()
    return cid, seen


def _reply(server: ParleyServer, cid: str) -> dict[str, Any]:
    message: dict[str, Any] = conversation(server, cid)["messages"][-1]
    assert message["role"] == "assistant"
    return message


PIECES = [f"w{n} " for n in range(100)]  # 10 s at 0.1 s a piece


def test_a_stateless_clients_stop_stops_the_upstream(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue(Reply(frames=text_frames(PIECES), delay=0.1))
    closed_before = upstream.connections_closed
    started = time.monotonic()
    cid, seen = _stream_and_leave(server, [{"role": "user", "content": "count slowly"}])
    assert seen.startswith("w0 w1 w2 ")
    # the upstream stream is closed while it still had most of its 10 s to go
    wait_for(lambda: upstream.connections_closed > closed_before, timeout=5)
    assert time.monotonic() - started < 3
    wait_for(lambda: _reply(server, cid)["status"] != "streaming", timeout=5)
    saved = _reply(server, cid)
    assert saved["status"] == "interrupted"
    assert saved["error"]["code"] == "client_disconnected"
    assert saved["content"].startswith(seen)  # the text so far, all of it kept
    assert "w99" not in saved["content"]
    assert saved["finish_reason"] is None
    assert len(upstream.requests) == 1  # and nothing after it


def test_a_named_conversations_reply_finishes_when_its_client_leaves(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    """The other half of ``auto``: the user comes back to this conversation."""
    upstream.queue_text("Sure.")
    cid = cid_of(
        sdk(server).chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "count with me"}]
        )
    )
    pieces = PIECES[:15]
    upstream.queue(Reply(frames=text_frames(pieces), delay=0.1))
    upstream.route_text("short title", "Counting")
    upstream.route_text("follow-up", '["Count back?"]')
    named, _ = _stream_and_leave(
        server,
        [{"role": "user", "content": "count slowly"}],
        extra_body={"conversation_id": cid},
    )
    assert named == cid
    wait_for(lambda: _reply(server, cid)["status"] != "streaming")
    saved = _reply(server, cid)
    assert (saved["status"], saved["content"]) == ("complete", "".join(pieces))
    # and, finished, it gets its title and suggestions like any turn the user returns to
    wait_for(lambda: conversation(server, cid)["title"] == "Counting")
    wait_for(lambda: conversation(server, cid)["suggestions"] == ["Count back?"])


def test_with_continue_a_stateless_reply_finishes_when_its_client_leaves(
    continuing: ParleyServer, upstream: MockOpenAI
) -> None:
    pieces = PIECES[:15]
    upstream.queue(Reply(frames=text_frames(pieces), delay=0.1))
    cid, seen = _stream_and_leave(continuing, [{"role": "user", "content": "count slowly"}])
    assert seen.startswith("w0 ")
    wait_for(lambda: _reply(continuing, cid)["status"] != "streaming")
    saved = _reply(continuing, cid)
    assert (saved["status"], saved["content"], saved["error"]) == (
        "complete",
        "".join(pieces),
        None,
    )


def test_a_stateless_client_that_waits_for_the_whole_reply_and_leaves_stops_it_too(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    """Without a stream nothing is written until the end: the client leaving is noticed
    at once (not at a failed write), and the upstream request closed then."""
    upstream.queue(Reply(frames=text_frames(PIECES), delay=0.1))
    closed_before = upstream.connections_closed
    started = time.monotonic()
    with (
        openai.OpenAI(
            base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0, timeout=0.5
        ) as impatient,
        pytest.raises(openai.APITimeoutError),
    ):
        impatient.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "count slowly, all of it"}]
        )
    wait_for(lambda: upstream.connections_closed > closed_before, timeout=5)
    assert time.monotonic() - started < 3  # not the 10 s the reply would take
    newest = httpx.get(f"{server.url}/v1/conversations?limit=1").json()["data"][0]
    assert newest["title"] == "count slowly, all of it"
    wait_for(lambda: _reply(server, newest["id"])["status"] != "streaming", timeout=5)
    saved = _reply(server, newest["id"])
    assert (saved["status"], saved["error"]["code"]) == ("interrupted", "client_disconnected")
    assert "w99" not in saved["content"]  # (asked of the upstream whole: nothing had come)
