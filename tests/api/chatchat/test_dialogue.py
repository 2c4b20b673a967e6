"""Chatchat's dialogue page against Parley: ``/chat/chat/completions`` as
``webui_pages/dialogue/dialogue.py`` (Langchain-Chatchat 0.3.1.3) calls it, read the way
that page reads it.

The page makes ``openai.Client(base_url=f"{api}/chat")`` and streams. For each chunk it
looks at ``status`` (Chatchat's ``AgentStatus``: llm_start 1, llm_new_token 2, llm_end 3,
agent_finish 5, tool_start 6, tool_end 7, error 8): text of status null is shown always;
1-3 only with "show the agent's steps" ticked; 5 replaces what is shown with its
content. ``shown`` below is that loop, written from the page's behaviour.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

ASK = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, agent={"max_iterations": 6})
    with ParleyServer(tmp_path_factory.mktemp("dialogue"), config) as parley:
        yield parley


@pytest.fixture
def page(server: ParleyServer, upstream: MockOpenAI) -> Iterator[openai.OpenAI]:
    """The client as the dialogue page makes it (its key: Chatchat sends "NONE"; a keyless
    loopback server takes any)."""
    upstream.reset()
    with openai.OpenAI(base_url=f"{server.url}/chat", api_key="NONE", max_retries=0) as client:
        yield client


def extras(chunk: Any) -> dict[str, Any]:
    return chunk.model_extra or {}


def shown(chunks: list[Any], *, output_agent: bool) -> str:
    """What the dialogue page shows after the stream, as its loop computes it."""
    text = ""
    for d in chunks:
        status = extras(d).get("status")
        content = d.choices[0].delta.content if d.choices else None
        if status == 8:
            raise AssertionError(f"the page shows an error: {content}")
        if status in (1, 2, 3):
            if not output_agent:
                continue
            text = (content or "") if status == 1 else text + (content or "")
        elif status == 5:
            text = content or ""
        elif status is None and not extras(d).get("is_ref"):
            text += content or ""
    return text


def test_plain_chat_is_status_null_and_shown_without_agent_steps(
    page: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Hello ", "there.")
    chunks = list(page.chat.completions.create(model="fast", messages=ASK, stream=True))
    assert shown(chunks, output_agent=False) == "Hello there."
    assert shown(chunks, output_agent=True) == "Hello there."
    assert {extras(c).get("status") for c in chunks if c.choices} == {None}
    ids = {extras(c)["message_id"] for c in chunks}
    assert len(ids) == 1
    assert next(iter(ids)).startswith("msg_")
    # an OpenAI client adding up the deltas gets the answer once
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Hello there."
    )


def test_plain_chat_without_streaming_has_status_null(
    page: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Fine.")
    reply = page.chat.completions.create(model="fast", messages=ASK)
    assert reply.choices[0].message.content == "Fine."
    assert "status" in extras(reply)
    assert extras(reply)["status"] is None


def test_agent_chat_numbers_its_steps_and_ends_with_the_answer(
    page: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_1", "current_time", "{}")])
    upstream.queue_text("It is ", "noon.")
    chunks = list(
        page.chat.completions.create(
            model="fast",
            messages=ASK,
            stream=True,
            tools=["current_time"],  # type: ignore[list-item]  # Chatchat sends names
        )
    )
    assert shown(chunks, output_agent=False) == "It is noon."
    assert shown(chunks, output_agent=True) == "It is noon."
    statuses = [extras(c).get("status") for c in chunks]
    assert statuses[0] == 1  # llm_start
    assert statuses.index(6) < statuses.index(7) < statuses.index(5)
    assert None not in statuses
    ended = next(c for c in chunks if extras(c).get("status") == 7)
    call = extras(ended)["tool_calls"][0]
    assert call["name"] == "current_time"
    assert call["is_error"] is False
    assert "iso" in json.loads(call["tool_output"])
    in_delta = ended.choices[0].delta.tool_calls[0]  # where Chatchat's agent chat puts it
    assert in_delta.function.name == "current_time"
    assert (in_delta.model_extra or {})["tool_output"] == call["tool_output"]
    last = next(c for c in chunks if extras(c).get("status") == 5)
    assert last.choices[0].finish_reason == "stop"


def test_agent_chat_without_streaming_says_agent_finish(
    page: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("No tool needed.")
    reply = page.chat.completions.create(
        model="fast",
        messages=ASK,
        tools=["current_time"],  # type: ignore[list-item]
    )
    assert reply.choices[0].message.content == "No tool needed."
    assert extras(reply)["status"] == 5


def test_chatchat_tools_parley_lacks_are_skipped_with_a_note(
    page: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Answered anyway.")
    chunks = list(
        page.chat.completions.create(
            model="fast",
            messages=ASK,
            stream=True,
            tools=["wolfram", "current_time"],  # type: ignore[list-item]
            tool_choice="wolfram",  # type: ignore[arg-type]
        )
    )
    assert shown(chunks, output_agent=False) == "Answered anyway."
    notes = extras(chunks[-1])["parley"]["notes"]
    assert any("wolfram" in note for note in notes)
    offered = [t["function"]["name"] for t in upstream.requests[0].get("tools", [])]
    assert "current_time" in offered
    assert "wolfram" not in offered
    assert "tool_choice" not in upstream.requests[0]  # the skipped tool is not forced


def test_the_openai_route_still_refuses_unknown_tool_names(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.reset()
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "fast", "messages": ASK, "tools": ["wolfram"]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_tool"


def test_a_failure_mid_stream_is_chatchat_error_status(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.reset()
    frames = [
        b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"mock-model",'
        b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Half"},'
        b'"finish_reason":null}]}\n\n'
    ]  # the upstream stops without finishing
    upstream.queue_raw(frames)
    with httpx.stream(
        "POST",
        f"{server.url}/chat/chat/completions",
        json={"model": "fast", "messages": ASK, "stream": True},
    ) as response:
        events = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")
        ]
    assert events[0]["status"] is None
    failure = events[-1]
    assert failure["status"] == 8
    assert failure["error"]["message"]


def test_the_pages_own_request_body_is_taken_and_the_conversation_kept(
    page: openai.OpenAI, upstream: MockOpenAI
) -> None:
    conversation = uuid.uuid4().hex  # the page's chat_box uid
    extra_body = {
        "metadata": {"images": [], "videos": [], "audios": []},  # its attachments
        "chat_model_config": {"llm_model": {"fast": {"temperature": 0.7}}},
        "conversation_id": conversation,
        "tool_input": {},
        "upload_image": None,
    }
    upstream.queue_text("First answer.")
    first = list(
        page.chat.completions.create(
            model="fast", messages=ASK, stream=True, max_tokens=4096, extra_body=extra_body
        )
    )
    assert shown(first, output_agent=False) == "First answer."
    upstream.queue_text("Second answer.")
    history = [*ASK, {"role": "assistant", "content": "First answer."}]
    second = list(
        page.chat.completions.create(
            model="fast",
            messages=[*history, {"role": "user", "content": "And now?"}],
            stream=True,
            extra_body=extra_body,
        )
    )
    assert shown(second, output_agent=False) == "Second answer."
    sent = upstream.requests[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"] == [
        "What time is it?",
        "First answer.",
        "And now?",
    ]
    assert "metadata" not in upstream.requests[-1]
