"""Many concurrent writers on SQLite: no lock errors reach clients, nothing is lost."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from tests.conftest import db_rows
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames


@pytest.mark.anyio
async def test_fifty_concurrent_streams(parley: ParleyServer, upstream: MockOpenAI) -> None:
    async with openai.AsyncOpenAI(base_url=f"{parley.url}/v1", api_key="k", max_retries=0) as c:
        # 25 conversations to continue, then 50 streams at once: 25 new conversations and
        # one more turn in each of the 25 (one reply at a time per conversation, so
        # concurrent streams are on different conversations)
        existing = []
        for n in range(25):
            upstream.queue_text("first")
            first = await c.chat.completions.create(
                model="fast", messages=[{"role": "user", "content": f"start {n}"}]
            )
            existing.append((first.model_extra or {})["parley"]["conversation_id"])
        for _ in range(50):
            upstream.queue(Reply(frames=text_frames([f"w{i} " for i in range(20)]), delay=0.01))

        async def one(n: int) -> str:
            extra = {"conversation_id": existing[n // 2]} if n % 2 else {}
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
    async with httpx.AsyncClient() as http:
        for conversation_id in existing:
            stored = db_rows(
                parley,
                "SELECT status FROM messages WHERE conversation_id = ?",
                conversation_id,
            )
            assert [row["status"] for row in stored] == ["complete"] * 4
            url = f"{parley.url}/v1/conversations/{conversation_id}"
            branch = (await http.get(url)).json()["messages"]
            assert [m["parent_id"] for m in branch[1:]] == [m["id"] for m in branch[:-1]]
            assert [m["role"] for m in branch] == ["user", "assistant"] * 2
