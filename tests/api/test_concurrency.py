"""Many concurrent writers on SQLite: no lock errors reach clients, nothing is lost."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from tests.conftest import db_rows
from tests.support.mock_openai import MockOpenAI, Reply, text_frames
from tests.support.server import ParleyServer


@pytest.mark.anyio
async def test_fifty_concurrent_streams(parley: ParleyServer, upstream: MockOpenAI) -> None:
    async with openai.AsyncOpenAI(base_url=f"{parley.url}/v1", api_key="k", max_retries=0) as c:
        upstream.queue_text("first")
        first = await c.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "start"}]
        )
        shared = (first.model_extra or {})["parley"]["conversation_id"]
        for _ in range(50):
            upstream.queue(Reply(frames=text_frames([f"w{i} " for i in range(20)]), delay=0.01))

        async def one(n: int) -> str:
            extra = {"conversation_id": shared} if n % 2 else {}
            stream = await c.chat.completions.create(
                model="fast",
                messages=[{"role": "user", "content": f"question {n}"}],
                stream=True,
                extra_body=extra,
            )
            return "".join([x.choices[0].delta.content or "" async for x in stream if x.choices])

        replies = await asyncio.gather(*(one(n) for n in range(50)))
    assert all(r == "".join(f"w{i} " for i in range(20)) for r in replies)
    assert "locked" not in parley.log()
    stored = db_rows(
        parley.db_path,
        "SELECT id, parent_id, role, status FROM messages WHERE conversation_id = ?",
        shared,
    )
    assert len(stored) == 2 + 25 * 2
    assert all(row["status"] == "complete" for row in stored)
    # every new user message hangs under the message its model call was shown (turns
    # racing each other start branches); the current branch is one unbroken chain
    ids = {row["id"] for row in stored}
    assert all(row["parent_id"] in ids for row in stored if row["parent_id"] is not None)
    async with httpx.AsyncClient() as http:
        branch = (await http.get(f"{parley.url}/v1/conversations/{shared}")).json()["messages"]
    assert [m["parent_id"] for m in branch[1:]] == [m["id"] for m in branch[:-1]]
    assert branch[-1]["role"] == "assistant"
