"""What the schema fuzzing suite (``tests/api/test_schema_fuzz.py``) needs beside
schemathesis: a server with keys of two owners and an admin, owner A's objects (with
secrets that only A's answers may hold), and planting A's ids into generated cases.

Planting: a generated case names random ids, which only ever reach "not found". To reach
the code behind an id, the ids of A's objects replace what was generated, by parameter
name, in the path, the query and the top-level fields of a JSON body.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx
import schemathesis

from tests.support.server import ParleyServer

SECRET = "f0cc1a"
"""In every secret of A's, and in nothing else the server knows."""


@dataclass
class Victim:
    """Owner A's objects, made through the API with A's key."""

    conversation_id: str
    message_id: str
    """The reply's."""
    user_message_id: str
    assistant_id: str
    kb_id: str
    kb_name: str
    document_id: str
    memory_id: str
    urls: tuple[str, ...] = field(default=())

    def values(self) -> dict[str, Any]:
        """A's values by the parameter names that take them."""
        return {
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "assistant_id": self.assistant_id,
            "assistant": self.assistant_id,
            "kb": self.kb_id,
            "document_id": self.document_id,
            "memory_id": self.memory_id,
            "knowledge_base_name": self.kb_name,
            "knowledge_bases": [self.kb_id],
            "owner": "alice",
        }


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def make_victim(server: ParleyServer, key: str) -> Victim:
    """A conversation (titled), an assistant, a knowledge base with a ready document and
    a memory, each holding a secret."""
    with server.client(key) as client:
        reply = _ok(
            client.post(
                "/chat/completions",
                json={"messages": [{"role": "user", "content": f"message {SECRET}"}]},
            )
        )
        conversation_id = reply["parley"]["conversation_id"]
        messages = _ok(client.get(f"/conversations/{conversation_id}"))["messages"]
        _ok(client.patch(f"/conversations/{conversation_id}", json={"title": f"title {SECRET}"}))
        assistant = _ok(
            client.post(
                "/assistants", json={"name": "alice-helper", "system_prompt": f"prompt {SECRET}"}
            )
        )
        base = _ok(
            client.post(
                "/knowledge_bases", json={"name": "alice-kb", "description": f"kb {SECRET}"}
            )
        )
        upload = _ok(
            client.post(
                f"/knowledge_bases/{base['id']}/documents",
                files=[("files", ("notes.txt", f"document {SECRET}".encode(), "text/plain"))],
            ),
            202,
        )
        document_id = upload["data"][0]["id"]
        _wait_ready(client, base["id"], document_id)
        memory = _ok(client.post("/memories", json={"text": f"memory {SECRET}"}), 201)
    victim = Victim(
        conversation_id=conversation_id,
        message_id=reply["parley"]["message_id"],
        user_message_id=messages[0]["id"],
        assistant_id=assistant["id"],
        kb_id=base["id"],
        kb_name=base["name"],
        document_id=document_id,
        memory_id=memory["id"],
    )
    victim.urls = (
        "/conversations",
        f"/conversations/{conversation_id}",
        f"/conversations/{conversation_id}/summary",
        f"/assistants/{victim.assistant_id}",
        f"/knowledge_bases/{victim.kb_id}",
        f"/knowledge_bases/{victim.kb_id}/documents",
        f"/knowledge_bases/{victim.kb_id}/documents/{document_id}/content",
        f"/memories/{victim.memory_id}",
    )
    return victim


def snapshot(server: ParleyServer, key: str, victim: Victim) -> dict[str, str]:
    """What A reads of each object (a change by anyone else shows here)."""
    with server.client(key) as client:
        return {url: _text(client.get(url)) for url in victim.urls}


def _text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.text


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def _wait_ready(client: httpx.Client, kb: str, document_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = client.get(f"/knowledge_bases/{kb}/documents/{document_id}").json()["status"]
        if status == "ready":
            return
        assert status in ("queued", "indexing"), status
        time.sleep(0.05)
    raise AssertionError("A's document was not indexed within 30 s")


def plant(case: schemathesis.Case, values: dict[str, Any]) -> set[str]:
    """Put ``values`` in the case where its parameters are named like them; the names
    planted in the path."""
    in_path = set()
    for name in list(case.path_parameters or {}):
        if name in values and isinstance(values[name], str):
            case.path_parameters[name] = values[name]
            in_path.add(name)
    for name in list(case.query or {}):
        if name in values and isinstance(values[name], str):
            case.query[name] = values[name]
    if isinstance(case.body, dict):
        for name in list(case.body):
            if name in values:
                case.body[name] = values[name]
    return in_path


def every_other(case: schemathesis.Case) -> bool:
    """True for about half the cases, the same ones on every run."""
    generated = repr(sorted((case.path_parameters or {}).items())) + repr(case.body)
    return zlib.crc32(generated.encode()) % 2 == 1
