"""Langchain-Chatchat's knowledge chat, file chat and direct tool call over a real server,
called and read the way Chatchat 0.3.1.3's WebUI does: ``webui_pages/kb_chat.py`` (the
OpenAI client on ``/knowledge_base/{mode}/{param}``, the first chunk's ``docs`` shown as
the references, then the deltas), ``ApiRequest.file_chat`` and ``dialogue.py`` (a chosen
tool with its ``tool_input``: the ``is_ref`` chunk's ``tool_output`` in the references).

Retrieval is lexical (``knowledge.embedder: none``), so what matches is certain.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.api.admission import is_guarded
from parley.api.chatchat.prompts import NO_MATCH
from parley.testing.mock_openai import MockOpenAI, text_frames

GUIDE = (
    b"# Parley Guide\n\n"
    b"## Usage\n\n"
    b"Run the server with the walrus command. It listens on port 8000 and answers "
    b"every request with a friendly greeting.\n"
)
NOTES = b"Zebrafish are small striped fish that are often kept in aquariums at home.\n"
QUESTION = "How do I start the walrus server?"
EXTRA = {"top_k": 3, "score_threshold": 2.0, "temperature": 0.7, "prompt_name": "default"}
"""What kb_chat.py sends in ``extra_body`` (with ``return_direct``)."""
LINK = re.compile(r"\]\((http[^)]+)\)")


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "none"})
    with ParleyServer(tmp_path_factory.mktemp("chatchat-rag"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


def http(server: ParleyServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {key}"}, timeout=60)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["code"] == 200, body
    return body["data"]


@pytest.fixture(scope="module")
def base(server: ParleyServer, keys: dict[str, str]) -> str:
    """Alice's base holding guide.md, indexed."""
    name = f"samples-{uuid.uuid4().hex[:8]}"
    with http(server, keys["alice"]) as api:
        ok(api.post("/knowledge_base/create_knowledge_base", json={"knowledge_base_name": name}))
        form = {"knowledge_base_name": name, "override": "false", "to_vector_store": "true"}
        uploaded = api.post(
            "/knowledge_base/upload_docs", data=form, files=[("files", ("guide.md", GUIDE))]
        )
        assert ok(uploaded) == {"failed_files": {}}
        deadline = time.monotonic() + 30
        while not all(
            f["in_db"]
            for f in ok(api.get("/knowledge_base/list_files", params={"knowledge_base_name": name}))
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    return name


@pytest.fixture(scope="module")
def temp_id(server: ParleyServer, keys: dict[str, str]) -> str:
    """A temporary base of alice's holding notes.txt (``ApiRequest.upload_temp_docs``)."""
    with http(server, keys["alice"]) as api:
        data = {"knowledge_id": "", "chunk_size": 750, "chunk_overlap": 150}
        response = api.post(
            "/knowledge_base/upload_temp_docs",
            data={**data, "zh_title_enhance": "false"},
            files=[("files", ("notes.txt", NOTES))],
        )
        answer = ok(response)
    assert answer["failed_files"] == []
    knowledge_id: str = answer["id"]
    return knowledge_id


def kb_client(server: ParleyServer, key: str, mode: str, param: str) -> openai.OpenAI:
    """kb_chat.py's client: ``openai.Client(base_url=f"{api_url}/knowledge_base/...")``."""
    return openai.Client(
        base_url=f"{server.url}/knowledge_base/{mode}/{param}", api_key=key, max_retries=0
    )


def webui_kb_chat(
    client: openai.OpenAI, question: str, *, return_direct: bool = False
) -> tuple[list[str], str, list[Any]]:
    """kb_chat.py's loop: the first chunk's ``docs``, then the deltas' text."""
    docs: list[str] = []
    text = ""
    chunks = []
    first = True
    for d in client.chat.completions.create(
        messages=[{"role": "user", "content": question}],
        model="fast",
        stream=True,
        extra_body={**EXTRA, "return_direct": return_direct},
    ):
        chunks.append(d)
        if first:
            docs = d.docs  # type: ignore[attr-defined]
            first = False
            continue
        text += d.choices[0].delta.content or ""
    return docs, text, chunks


def last_prompt(upstream: MockOpenAI) -> str:
    content: str = upstream.requests[-1]["messages"][-1]["content"]
    return content


# --- the knowledge chat ------------------------------------------------------------------


def test_knowledge_chat_streams_the_references_first_then_the_answer(
    server: ParleyServer, keys: dict[str, str], base: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Run ", "the walrus ", "command.")
    client = kb_client(server, keys["alice"], "local_kb", base)
    docs, text, chunks = webui_kb_chat(client, QUESTION)

    assert text == "Run the walrus command."
    assert len(docs) == 1
    assert docs[0].startswith("出处 [1] [guide.md](")
    assert "Run the server with the walrus command." in docs[0]
    assert chunks[0].choices[0].delta.content is None  # the references chunk says nothing
    assert all(c.status is None for c in chunks)  # type: ignore[attr-defined]
    link = LINK.search(docs[0])
    assert link is not None
    assert link.group(1).startswith(f"{server.url}/knowledge_base/download_doc?")
    downloaded = httpx.get(link.group(1), headers={"authorization": f"Bearer {keys['alice']}"})
    assert downloaded.status_code == 200
    assert downloaded.content == GUIDE

    prompt = last_prompt(upstream)
    assert "【已知信息】" in prompt
    assert "Run the server with the walrus command." in prompt
    assert f"【问题】{QUESTION}" in prompt
    assert "tools" not in upstream.requests[-1]


def test_no_match_lists_the_notice_and_asks_with_the_empty_prompt(
    server: ParleyServer, keys: dict[str, str], base: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("I cannot say.")
    question = "Quixotic xylophones?"
    docs, text, _ = webui_kb_chat(kb_client(server, keys["alice"], "local_kb", base), question)
    assert docs == [NO_MATCH]
    assert text == "I cannot say."
    assert last_prompt(upstream) == f"请你回答我的问题:\n{question}"


def test_return_direct_answers_the_references_without_a_model(
    server: ParleyServer, keys: dict[str, str], base: str, upstream: MockOpenAI
) -> None:
    client = kb_client(server, keys["alice"], "local_kb", base)
    docs, text, chunks = webui_kb_chat(client, QUESTION, return_direct=True)
    assert len(chunks) == 1
    assert docs[0].startswith("出处 [1] [guide.md](")
    assert text == ""

    whole = client.chat.completions.create(
        messages=[{"role": "user", "content": QUESTION}],
        model="fast",
        extra_body={**EXTRA, "return_direct": True},
    )
    assert whole.choices[0].message.content == ""
    assert whole.docs == docs  # type: ignore[attr-defined]
    assert upstream.requests == []


def test_a_whole_answer_carries_its_references(
    server: ParleyServer, keys: dict[str, str], base: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Use the walrus command.")
    client = kb_client(server, keys["alice"], "local_kb", base)
    whole = client.chat.completions.create(
        messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": QUESTION},
        ],
        model="fast",
        extra_body={**EXTRA, "return_direct": False},
    )
    assert whole.choices[0].message.content == "Use the walrus command."
    docs = whole.docs  # type: ignore[attr-defined]
    assert docs[0].startswith("出处 [1] [guide.md](")
    sent = upstream.requests[-1]["messages"]
    assert [m["content"] for m in sent[:2]] == ["Hello", "Hi."]  # the history as it was
    assert "Run the server with the walrus command." in sent[-1]["content"]


def test_a_missing_base_is_a_chatchat_404(
    server: ParleyServer, keys: dict[str, str], base: str
) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        webui_kb_chat(kb_client(server, keys["alice"], "local_kb", "nope"), QUESTION)
    assert "未找到知识库 nope" in str(raised.value.body)  # what kb_chat.py's st.error shows

    with http(server, keys["bob"]) as api:  # alice's base is missing to bob
        response = api.post(
            f"/knowledge_base/local_kb/{base}/chat/completions",
            json={"messages": [{"role": "user", "content": QUESTION}], "stream": True},
        )
    assert response.status_code == 404
    assert response.json()["code"] == 404
    assert response.json()["msg"] == f"未找到知识库 {base}"


def test_search_engine_mode_is_refused_with_a_reason(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        webui_kb_chat(kb_client(server, keys["alice"], "search_engine", "bing"), QUESTION)
    assert "search engine" in str(raised.value.body)


def test_chat_over_a_temporary_base(
    server: ParleyServer, keys: dict[str, str], temp_id: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("They are striped.")
    client = kb_client(server, keys["alice"], "temp_kb", temp_id)
    docs, text, _ = webui_kb_chat(client, "What are zebrafish like?")
    assert text == "They are striped."
    assert docs[0].startswith("出处 [1] [notes.txt](")
    assert "Zebrafish are small striped fish" in last_prompt(upstream)

    with pytest.raises(openai.NotFoundError):  # bob cannot use alice's temporary base
        webui_kb_chat(kb_client(server, keys["bob"], "temp_kb", temp_id), "zebrafish?")


# --- the file chat -----------------------------------------------------------------------


def file_chat_body(knowledge_id: str, query: str, *, stream: bool) -> dict[str, Any]:
    """``ApiRequest.file_chat``'s body."""
    return {
        "query": query,
        "knowledge_id": knowledge_id,
        "top_k": 3,
        "score_threshold": 2.0,
        "history": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
        "stream": stream,
        "model_name": "fast",
        "temperature": 0.9,
        "max_tokens": None,
        "prompt_name": "default",
    }


def test_file_chat_streams_answer_events_then_the_docs(
    server: ParleyServer, keys: dict[str, str], temp_id: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Small ", "and striped.")
    events: list[dict[str, Any]] = []
    with (
        http(server, keys["alice"]) as api,
        api.stream(
            "POST", "/chat/file_chat", json=file_chat_body(temp_id, "zebrafish?", stream=True)
        ) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(orjson.loads(line[6:]))
    assert "".join(e["answer"] for e in events[:-1]) == "Small and striped."
    assert events[-1] == {
        "docs": [
            "出处 [1] [notes.txt] \n\n" + NOTES.decode().strip() + "\n\n",  # the passage as indexed
        ]
    }
    assert upstream.requests[-1]["stream"] is True  # token by token from the upstream too
    sent = upstream.requests[-1]["messages"]
    assert [m["content"] for m in sent[:2]] == ["Hi", "Hello"]
    assert "Zebrafish are small striped fish" in sent[-1]["content"]
    assert "【问题】zebrafish?" in sent[-1]["content"]


def test_file_chat_without_streaming_answers_once(
    server: ParleyServer, keys: dict[str, str], temp_id: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Striped.")
    with http(server, keys["alice"]) as api:
        response = api.post(
            "/chat/file_chat", json=file_chat_body(temp_id, "zebrafish?", stream=False)
        )
        assert response.status_code == 200
        body = response.json()
        assert body["answer"] == "Striped."
        assert body["docs"][0].startswith("出处 [1] [notes.txt] \n\n")

        missing = api.post("/chat/file_chat", json=file_chat_body("kb_nope", "x", stream=False))
    assert missing.status_code == 404
    assert missing.json()["code"] == 404
    assert "kb_nope" in missing.json()["msg"]


def test_a_file_chat_cut_off_midway_ends_with_a_chatchat_failure(
    server: ParleyServer, keys: dict[str, str], temp_id: str, upstream: MockOpenAI
) -> None:
    upstream.queue_raw(text_frames(["Small ", "and ", "striped."]), cut_after=2)
    with (
        http(server, keys["alice"]) as api,
        api.stream(
            "POST", "/chat/file_chat", json=file_chat_body(temp_id, "zebrafish?", stream=True)
        ) as response,
    ):
        assert response.status_code == 200
        events = [orjson.loads(line[6:]) for line in response.iter_lines() if line[:6] == "data: "]
    assert events[0] == {"answer": "Small "}
    assert events[-1]["code"] >= 500  # what ApiRequest's check_error_msg reads
    assert events[-1]["msg"]
    assert not any("docs" in event for event in events)


# --- the direct tool call ----------------------------------------------------------------


def webui_tool_chat(
    server: ParleyServer, key: str, tool: str, tool_input: dict[str, Any], question: str
) -> list[Any]:
    """dialogue.py's call with one tool chosen and its input filled in (no agent)."""
    client = openai.Client(base_url=f"{server.url}/chat", api_key=key, max_retries=0)
    extra_body = {
        "metadata": None,
        "chat_model_config": {},
        "conversation_id": uuid.uuid4().hex,
        "tool_input": tool_input,
        "upload_image": None,
    }
    return list(
        client.chat.completions.create(
            messages=[{"role": "user", "content": question}],
            model="fast",
            stream=True,
            extra_body=extra_body,
            tools=[tool],  # type: ignore[list-item]
            tool_choice=tool,  # type: ignore[arg-type]
        )
    )


def shown_text(chunks: list[Any]) -> str:
    """What dialogue.py shows for status null: the deltas of the chunks not ``is_ref``."""
    return "".join(
        c.choices[0].delta.content or ""
        for c in chunks
        if c.status is None and not getattr(c, "is_ref", False) and c.choices
    )


def test_a_chosen_knowledge_tool_runs_first_and_its_docs_are_the_references(
    server: ParleyServer, keys: dict[str, str], base: str, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Use ", "walrus.")
    tool_input = {"database": base, "query": "walrus command"}
    chunks = webui_tool_chat(
        server, keys["alice"], "search_local_knowledgebase", tool_input, QUESTION
    )
    first = chunks[0]
    assert first.is_ref is True
    assert first.status is None
    assert first.tool_call == "search_local_knowledgebase"
    output = first.tool_output
    assert output["knowledge_base"] == base
    assert output["docs"][0]["metadata"]["source"] == "guide.md"
    assert "walrus command" in output["docs"][0]["page_content"]
    assert shown_text(chunks) == "Use walrus."

    sent = upstream.requests[-1]
    assert "tools" not in sent
    prompt = sent["messages"][-1]["content"]
    assert "Run the server with the walrus command." in prompt
    assert f"【问题】{QUESTION}" in prompt
    assert '"docs"' not in prompt  # the passages' text, as Chatchat gives it, not the JSON


def test_a_chosen_calculator_puts_its_result_in_the_prompt(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    upstream.queue_text("It is 21.")
    chunks = webui_tool_chat(server, keys["alice"], "calculate", {"text": "3 * 7"}, "3 * 7?")
    first = chunks[0]
    assert first.is_ref is True
    assert first.tool_call == "calculate"
    assert "21" in first.content
    assert "21" in last_prompt(upstream)
    assert shown_text(chunks) == "It is 21."


def test_an_unknown_chosen_tool_is_refused(server: ParleyServer, keys: dict[str, str]) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        webui_tool_chat(server, keys["alice"], "no_such_tool", {"x": "y"}, "hi")
    assert raised.value.status_code in (400, 404)
    assert "no_such_tool" in str(raised.value.body)


# --- admission ---------------------------------------------------------------------------


def test_the_knowledge_and_file_chats_are_guarded_like_chat() -> None:
    assert is_guarded("/knowledge_base/local_kb/samples/chat/completions")
    assert is_guarded("/knowledge_base/temp_kb/kb_1/chat/completions")
    assert is_guarded("/chat/file_chat")
    assert is_guarded("/chat/chat/completions")
    assert not is_guarded("/knowledge_base/list_files")
    assert not is_guarded("/knowledge_base/upload_docs")
