"""Assistants in chat (the ``assistant`` extension field), and the finish transforms: the
official client against a real server in front of the mock upstream."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, chunk, sse

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("assistants"), server_config(upstream)) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer, upstream: MockOpenAI) -> Iterator[openai.OpenAI]:
    upstream.reset()
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as c:
        yield c


def make_assistant(server: ParleyServer, **fields: Any) -> dict[str, Any]:
    response = httpx.post(f"{server.url}/v1/assistants", json=fields)
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


def conversation(server: ParleyServer, cid: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.url}/v1/conversations/{cid}").json()
    return body


def test_an_assistant_sets_model_sampling_tools_and_policies(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    make_assistant(
        server,
        name="clock",
        model="mock/mock-large",
        sampling={"temperature": 0.3, "seed": 7},
        reasoning_effort="high",
        tools=["current_time"],
        tool_policies={"current_time": "ask"},
    )
    upstream.queue_tool_calls([("call_c", "current_time", "{}")])
    reply = client.chat.completions.create(
        model="",  # the assistant's model
        messages=[{"role": "user", "content": "what time is it"}],
        extra_body={"assistant": "clock"},
    )
    sent = upstream.requests[-1]
    assert sent["model"] == "mock-large"
    assert (sent["temperature"], sent["seed"], sent["reasoning_effort"]) == (0.3, 7, "high")
    assert [t["function"]["name"] for t in sent["tools"]] == ["current_time"]
    extra = (reply.model_extra or {})["parley"]
    assert extra["pending_approvals"][0]["tool"] == "current_time"  # the assistant's policy
    cid = extra["conversation_id"]
    # the conversation keeps its assistant: the next turn uses it without naming it
    upstream.queue_text("Later.")
    client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "never mind"}],
        extra_body={"conversation_id": cid},
    )
    assert upstream.requests[-1]["temperature"] == 0.3
    # the request's own values win over the assistant's
    upstream.queue_text("ok")
    client.chat.completions.create(
        model="fast",
        temperature=1.5,
        messages=[{"role": "user", "content": "x"}],
        extra_body={"conversation_id": cid},
    )
    assert (upstream.requests[-1]["model"], upstream.requests[-1]["temperature"]) == (
        "mock-model",
        1.5,
    )


def test_an_unknown_assistant_is_a_clear_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"assistant": "nobody"},
        )
    assert missing.value.code == "assistant_not_found"


def test_regex_rules_change_what_is_stored_and_what_is_shown(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    make_assistant(
        server,
        name="rules",
        regex_rules=[
            {"pattern": "secret", "replacement": "[hidden]", "roles": ["assistant"]},
            {
                "pattern": "colour",
                "replacement": "color",
                "roles": ["assistant"],
                "display_only": True,
            },
            {"pattern": r"\d{4}-\d{4}", "replacement": "####", "roles": ["user"]},
        ],
    )
    upstream.queue_text("The sec", "ret colour ", "is blue.")
    stream = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "card 1234-5678, what colour?"}],
        stream=True,
        extra_body={"assistant": "rules"},
    )
    chunks = list(stream)
    shown = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert shown == "The [hidden] color is blue."  # storage and display rules, split or not
    sent_user = upstream.requests[-1]["messages"][-1]["content"]
    assert sent_user == "card ####, what colour?"  # a user storage rule: stored and sent
    cid = (chunks[-1].model_extra or {})["parley"]["conversation_id"]
    stored = conversation(server, cid)["messages"]
    assert stored[0]["content"] == "card ####, what colour?"
    assert stored[1]["content"] == "The [hidden] colour is blue."  # display rules not stored
    upstream.queue_text("More secret colour.")
    whole = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "again"}],
        extra_body={"conversation_id": cid},
    )
    assert whole.choices[0].message.content == "More [hidden] color."


def test_base64_images_in_a_reply_are_saved_as_files(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    data = base64.b64encode(PNG).decode()
    upstream.queue_text("Here: ", f"![a chart](data:image/png;base64,{data})", " done")
    reply = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "draw"}]
    )
    text = reply.choices[0].message.content or ""
    assert "base64" not in text
    url = text.split("](")[1].split(")")[0]
    assert url.startswith("/v1/files/img_")
    image = httpx.get(f"{server.url}{url}")
    assert image.status_code == 200
    assert image.headers["content-type"] == "image/png"
    assert image.content == PNG
    cid = (reply.model_extra or {})["parley"]["conversation_id"]
    assert url in conversation(server, cid)["messages"][-1]["content"]
    missing = httpx.get(f"{server.url}/v1/files/img_0000")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "file_not_found")
    assert json.dumps(conversation(server, cid)).count("base64") == 0


def test_the_assistant_prompt_leads_the_system_prompt_with_placeholders_filled(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    make_assistant(server, name="guide", system_prompt="You are a guide. Model: {{model_name}}.")
    upstream.queue_text("Hello.")
    client.chat.completions.create(
        model="fast",
        messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "hi"},
        ],
        extra_body={"assistant": "guide"},
    )
    system = upstream.requests[-1]["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a guide. Model: fast.")
    assert "Answer briefly." in system["content"]  # the client's own prompt follows


def test_storage_rules_apply_once_across_a_pause_and_forks_keep_the_assistant(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    make_assistant(
        server,
        name="careful",
        tools=["current_time"],
        tool_policies={"current_time": "ask"},
        regex_rules=[{"pattern": "Hello", "replacement": "Hello there", "roles": ["assistant"]}],
    )
    upstream.queue(
        Reply(
            frames=[
                sse(chunk({"role": "assistant", "content": "Hello"})),
                sse(
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_t",
                                    "type": "function",
                                    "function": {"name": "current_time", "arguments": "{}"},
                                }
                            ]
                        }
                    )
                ),
                sse(chunk({}, "tool_calls")),
                b"data: [DONE]\n\n",
            ]
        )
    )
    paused = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "time?"}],
        extra_body={"assistant": "careful"},
    )
    cid = (paused.model_extra or {})["parley"]["conversation_id"]
    upstream.queue_text("It is noon.")
    client.post(
        f"/conversations/{cid}/approvals",
        body={"decisions": [{"tool_call_id": "call_t", "decision": "approve"}]},
        cast_to=openai.types.chat.ChatCompletion,
    )
    reply = conversation(server, cid)["messages"][-1]
    assert reply["content"] == "Hello there\n\nIt is noon."  # the rule ran once
    fork = httpx.post(f"{server.url}/v1/conversations/{cid}/fork").json()
    upstream.queue_text("ok")
    client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "and now?"}],
        extra_body={"conversation_id": fork["id"]},
    )
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["current_time"]
