"""Parley as an MCP server (``/mcp``): the SDK's own client against a real Parley server.

Two owners, alice and bob, each with a knowledge base, memories and a conversation.
Every tool is called over streamable HTTP and must answer the caller's data only;
another owner's knowledge base is "not found". Keys are checked before the MCP layer.
Knowledge search is lexical here (``knowledge.embedder: none``), as in
tests/api/test_knowledge_chat.py, so what matches is certain.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import mcp_types as types
import openai
import pytest
from mcp.client.streamable_http import streamable_http_client

from mcp import ClientSession
from parley.testing.mock_openai import MockOpenAI
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

pytestmark = pytest.mark.anyio

GUIDE = """# Parley field guide

## Volcanoes

The zorbulite crystal forms only inside cooling basalt vents on the island of Quenmar.
Miners there carry copper lanterns because zorbulite glows green near copper.

## Rivers

The river Ostravel floods every ninth spring, and the farmers plant marrowgrass after.
"""

BOB_NOTES = """Harbour log

The lighthouse keeper of Wendlemouth polishes the zorbulite-free brass lens each dawn.
The ferry to Skarra leaves at nine.
"""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}
KNOWLEDGE_TOOLS = {"knowledge_search", "knowledge_list"}
ALL_TOOLS = KNOWLEDGE_TOOLS | {"memory_recall", "conversation_search"}


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "none"})
    with ParleyServer(tmp_path_factory.mktemp("mcpserve"), config) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture(scope="module")
def world(server: ParleyServer, upstream: MockOpenAI, keys: dict[str, str]) -> dict[str, Any]:
    """Each owner's knowledge base (one document, indexed), memories and conversation."""
    alice, bob = keys["alice"], keys["bob"]
    bases = {
        "alice": _base(server, alice, "field-guide", "guide.md", GUIDE),
        "bob": _base(server, bob, "harbour", "log.txt", BOB_NOTES),
    }
    with server.client(alice) as client:
        tutor = client.post("/assistants", json={"name": "Tutor"}).json()
        _remember(client, "The user's cat is called Marmalade.")
        _remember(client, "The user studies Finnish verb conjugation.", tutor["id"])
    with server.client(bob) as client:
        _remember(client, "The user's dog is called Biscuit.")
    for key, phrase in ((alice, "periwinkle-otter"), (bob, "saffron-heron")):
        upstream.queue_text("Noted.")
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0) as chat:
            chat.chat.completions.create(
                model="mock/mock-model",
                messages=[{"role": "user", "content": f"My pass phrase is {phrase}, remember"}],
            )
    return {"bases": bases, "tutor": tutor}


def _base(server: ParleyServer, key: str, name: str, filename: str, text: str) -> dict[str, Any]:
    with server.client(key) as client:
        created = client.post("/knowledge_bases", json={"name": name})
        assert created.status_code == 200, created.text
        kb: dict[str, Any] = created.json()
        uploaded = client.post(
            f"/knowledge_bases/{kb['id']}/documents",
            files=[("files", (filename, text.encode(), "text/plain"))],
        )
        assert uploaded.status_code == 202, uploaded.text
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            documents = client.get(f"/knowledge_bases/{kb['id']}/documents").json()["data"]
            if [d["status"] for d in documents] == ["ready"]:
                return kb
            time.sleep(0.1)
    raise AssertionError(f"{filename} was not indexed")


def _remember(client: httpx.Client, text: str, assistant_id: str | None = None) -> None:
    body = {"text": text, "assistant_id": assistant_id}
    response = client.post("/memories", json=body)
    assert response.status_code == 201, response.text


@asynccontextmanager
async def session(
    server: ParleyServer, key: str | None, path: str = "/mcp"
) -> AsyncIterator[ClientSession]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{server.url}{path}", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def call(client: ClientSession, tool: str, **arguments: Any) -> types.CallToolResult:
    return await client.call_tool(tool, arguments)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


# --- tools -----------------------------------------------------------------------------------


async def test_the_tools_are_listed_read_only_with_schemas(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    async with session(server, keys["alice"]) as client:
        info = client.initialize_result
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert info is not None
    assert info.server_info.name == "parley"
    assert set(tools) == ALL_TOOLS
    search = tools["knowledge_search"]
    assert search.description
    assert "knowledge bases" in search.description
    assert search.input_schema["required"] == ["query"]
    assert set(search.input_schema["properties"]) == {"query", "knowledge_bases", "top_k"}
    assert "ctx" not in search.input_schema["properties"]
    assert search.output_schema is not None
    assert "passages" in search.output_schema["properties"]
    for tool in tools.values():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.output_schema is not None


async def test_knowledge_search_finds_passages_with_their_source(
    server: ParleyServer, keys: dict[str, str], world: dict[str, Any]
) -> None:
    async with session(server, keys["alice"]) as client:
        everywhere = await call(client, "knowledge_search", query="zorbulite copper lanterns")
        by_name = await call(
            client, "knowledge_search", query="Ostravel floods", knowledge_bases=["field-guide"]
        )
        by_id = await call(
            client,
            "knowledge_search",
            query="Ostravel floods",
            knowledge_bases=[world["bases"]["alice"]["id"]],
            top_k=1,
        )
        nothing = await call(client, "knowledge_search", query="quasar")
    found = structured(everywhere)
    assert found["query"] == "zorbulite copper lanterns"
    assert found["knowledge_bases"] == ["field-guide"]
    first = found["passages"][0]
    assert first["rank"] == 1
    assert first["score"] > 0
    assert first["knowledge_base"] == "field-guide"
    assert first["knowledge_base_id"] == world["bases"]["alice"]["id"]
    assert first["source"]["file"] == "guide.md"
    assert first["source"]["section"] == "Parley field guide"
    assert first["source"]["document_id"].startswith("doc_")
    assert "glows green near copper" in first["text"]
    readable = text_of(everywhere)
    assert "passage(s) for 'zorbulite copper lanterns' in field-guide" in readable
    assert "[1] guide.md" in readable
    assert "section 'Parley field guide'" in readable
    assert "knowledge base 'field-guide'" in readable
    assert "UNTRUSTED DOCUMENT CONTENT" in readable  # fenced for the calling model
    assert "glows green near copper" in readable

    assert "every ninth spring" in structured(by_name)["passages"][0]["text"]
    assert len(structured(by_id)["passages"]) == 1
    assert structured(by_id)["passages"][0]["text"] == structured(by_name)["passages"][0]["text"]
    assert structured(nothing)["passages"] == []
    assert text_of(nothing) == "No passage matched 'quasar' in field-guide."


async def test_knowledge_list_shows_the_callers_bases(
    server: ParleyServer, keys: dict[str, str], world: dict[str, Any]
) -> None:
    async with session(server, keys["alice"]) as client:
        listed = await call(client, "knowledge_list")
    bases = structured(listed)["knowledge_bases"]
    assert [(b["name"], b["id"], b["documents"]) for b in bases] == [
        ("field-guide", world["bases"]["alice"]["id"], 1)
    ]
    assert bases[0]["chunks"] >= 1
    assert f"- field-guide ({world['bases']['alice']['id']}), 1 document(s)" in text_of(listed)


async def test_memory_recall_global_and_by_assistant(
    server: ParleyServer, keys: dict[str, str], world: dict[str, Any]
) -> None:
    tutor = world["tutor"]
    async with session(server, keys["alice"]) as client:
        pets = await call(client, "memory_recall", query="cat")
        by_name = await call(client, "memory_recall", query="Finnish", assistant="Tutor")
        by_id = await call(client, "memory_recall", query="Finnish", assistant=tutor["id"])
        not_global = await call(client, "memory_recall", query="Finnish")
        unknown = await call(client, "memory_recall", query="cat", assistant="Nobody")
    recalled = structured(pets)
    assert recalled["scope"] == "global"
    assert [m["text"] for m in recalled["memories"]] == ["The user's cat is called Marmalade."]
    assert recalled["memories"][0]["id"].startswith("mem_")
    assert recalled["memories"][0]["score"] > 0
    assert "Marmalade" in text_of(pets)
    assert "UNTRUSTED MEMORY" in text_of(pets)
    for result in (by_name, by_id):
        assert structured(result)["scope"] == tutor["id"]
        assert [m["text"] for m in structured(result)["memories"]] == [
            "The user studies Finnish verb conjugation."
        ]
    assert structured(not_global)["memories"] == []  # the tutor's memory is not global
    assert unknown.is_error
    assert text_of(unknown).endswith("assistant 'Nobody' not found")


async def test_conversation_search_finds_the_callers_messages(
    server: ParleyServer, keys: dict[str, str], world: dict[str, Any]
) -> None:
    async with session(server, keys["alice"]) as client:
        found = await call(client, "conversation_search", query="PERIWINKLE-otter")
        missing = await call(client, "conversation_search", query="no such words anywhere")
    messages = structured(found)["messages"]
    assert len(messages) == 1
    assert messages[0]["role"] == "user"
    assert messages[0]["conversation_id"].startswith("conv")
    assert "My pass phrase is periwinkle-otter" in messages[0]["snippet"]
    assert "periwinkle-otter" in text_of(found)
    assert "UNTRUSTED MESSAGE" in text_of(found)
    assert structured(missing)["messages"] == []
    assert text_of(missing) == "No message contains 'no such words anywhere'."


async def test_bad_arguments_are_tool_errors(server: ParleyServer, keys: dict[str, str]) -> None:
    async with session(server, keys["alice"]) as client:
        too_many = await call(client, "knowledge_search", query="zorbulite", top_k=500)
        blank = await call(client, "memory_recall", query="   ")
    assert too_many.is_error
    assert "top_k" in text_of(too_many)
    assert blank.is_error
    assert text_of(blank).endswith("query must not be empty")


# --- isolation -------------------------------------------------------------------------------


async def test_another_owners_data_is_never_found(
    server: ParleyServer, keys: dict[str, str], world: dict[str, Any]
) -> None:
    alices = world["bases"]["alice"]
    async with session(server, keys["bob"]) as client:
        search = await call(client, "knowledge_search", query="zorbulite crystal copper")
        by_name = await call(
            client, "knowledge_search", query="zorbulite", knowledge_bases=["field-guide"]
        )
        by_id = await call(
            client, "knowledge_search", query="zorbulite", knowledge_bases=[alices["id"]]
        )
        listed = await call(client, "knowledge_list")
        memories = await call(client, "memory_recall", query="cat Marmalade")
        assistant = await call(client, "memory_recall", query="Finnish", assistant="Tutor")
        assistant_id = await call(
            client, "memory_recall", query="Finnish", assistant=world["tutor"]["id"]
        )
        messages = await call(client, "conversation_search", query="periwinkle-otter")
        own = await call(client, "conversation_search", query="saffron-heron")
    # bob's own base holds "zorbulite" too: only his passage comes back
    passages = structured(search)["passages"]
    assert structured(search)["knowledge_bases"] == ["harbour"]
    assert [p["source"]["file"] for p in passages] == ["log.txt"]
    assert "glows green" not in text_of(search)  # alice's passage
    assert by_name.is_error
    assert text_of(by_name).endswith("knowledge base 'field-guide' not found")
    assert by_id.is_error
    assert text_of(by_id).endswith(f"knowledge base {alices['id']!r} not found")
    assert [b["name"] for b in structured(listed)["knowledge_bases"]] == ["harbour"]
    assert structured(memories)["memories"] == []
    assert assistant.is_error
    assert text_of(assistant).endswith("assistant 'Tutor' not found")
    assert assistant_id.is_error
    assert structured(messages)["messages"] == []
    assert "saffron-heron" in structured(own)["messages"][0]["snippet"]


async def test_two_owners_calling_at_once_each_see_their_own(
    server: ParleyServer, keys: dict[str, str], world: dict[str, Any]
) -> None:
    """Interleaved calls over two sessions, and over many fresh ones: the owner must
    follow each request, whatever task the SDK runs its handler in."""
    expected = {
        "alice": "The user's cat is called Marmalade.",
        "bob": "The user's dog is called Biscuit.",
    }

    async def recall(client: ClientSession, owner: str) -> None:
        result = await call(client, "memory_recall", query="user called", top_k=5)
        assert [m["text"] for m in structured(result)["memories"]] == [expected[owner]], owner
        listed = await call(client, "knowledge_list")
        names = [b["name"] for b in structured(listed)["knowledge_bases"]]
        assert names == [{"alice": "field-guide", "bob": "harbour"}[owner]]

    async with session(server, keys["alice"]) as alice, session(server, keys["bob"]) as bob:
        await asyncio.gather(
            *(recall(c, o) for _ in range(15) for c, o in ((alice, "alice"), (bob, "bob")))
        )

    async def fresh(owner: str) -> None:
        async with session(server, keys[owner]) as client:
            await recall(client, owner)

    await asyncio.gather(*(fresh(owner) for _ in range(5) for owner in ("alice", "bob")))


# --- the HTTP edge ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "sk-parley-wrong"])
def test_a_missing_or_wrong_key_is_refused_before_mcp(
    server: ParleyServer, keys: dict[str, str], key: str | None
) -> None:
    headers = {**MCP_HEADERS, **({"authorization": f"Bearer {key}"} if key else {})}
    for path in ("/mcp", "/mcp/"):
        response = httpx.post(f"{server.url}{path}", json=INITIALIZE, headers=headers)
        error = api_error(response, 401)
        assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
        assert ("invalid API key" if key else "missing API key") in error["message"]
        assert response.headers["content-type"] == "application/json"


def test_any_host_name_is_served(server: ParleyServer, keys: dict[str, str]) -> None:
    """No Host allow-list: a server behind a proxy sees its public name."""
    headers = {
        **MCP_HEADERS,
        "authorization": f"Bearer {keys['alice']}",
        "host": "parley.example.com",
        "origin": "https://parley.example.com",
    }
    response = httpx.post(f"{server.url}/mcp", json=INITIALIZE, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["result"]["serverInfo"]["name"] == "parley"
    assert "mcp-session-id" not in response.headers  # stateless


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_only_post_is_served(server: ParleyServer, keys: dict[str, str], method: str) -> None:
    """Stateless: no idle stream for server messages, no session to delete."""
    headers = {**MCP_HEADERS, "authorization": f"Bearer {keys['alice']}"}
    response = httpx.request(method, f"{server.url}/mcp", headers=headers, timeout=5)
    assert api_error(response, 405)["code"] == "method_not_allowed"
    anonymous = httpx.request(method, f"{server.url}/mcp", headers=MCP_HEADERS, timeout=5)
    assert api_error(anonymous, 401)["code"] == "invalid_api_key"  # the key is checked first


async def test_the_url_with_a_trailing_slash_works(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    async with session(server, keys["alice"], path="/mcp/") as client:
        tools = await client.list_tools()
    assert {tool.name for tool in tools.tools} == ALL_TOOLS


def test_mcp_is_not_in_the_openapi_schema(server: ParleyServer) -> None:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith("/mcp")]


# --- knowledge off ---------------------------------------------------------------------------


async def test_without_knowledge_only_the_other_tools_are_offered(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = server_config(upstream, knowledge={"enabled": False})
    with ParleyServer(tmp_path_factory.mktemp("mcpnokb"), config) as server:
        key = server.create_key("carol")
        async with session(server, key) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            search = await call(client, "knowledge_search", query="anything")
            recalled = await call(client, "memory_recall", query="anything")
    assert tools == ALL_TOOLS - KNOWLEDGE_TOOLS
    assert search.is_error
    assert "knowledge_search" in text_of(search)
    assert structured(recalled)["memories"] == []
