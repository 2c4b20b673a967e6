"""Coalesced streaming (``stream_options.coalesce_ms``): fewer chunks, the same text, and
everything flushed at the end. The official client against a real server; the
``Coalescer`` itself with a recording writer."""

from __future__ import annotations

import httpx
import openai
import pytest
from tests.support.server import ParleyServer
from tests.support.waiting import until

from parley.api.coalesce import Coalescer, Kind
from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

WORDS = [f"w{i} " for i in range(40)]


def content_chunks(client: openai.OpenAI, upstream: MockOpenAI, **options: int) -> list[str]:
    upstream.queue(Reply(frames=text_frames(WORDS), delay=0.005))
    stream = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True, **options},  # type: ignore[typeddict-item]
    )
    return [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]


def test_coalescing_sends_fewer_chunks_with_the_same_text(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
) -> None:
    plain = content_chunks(client, upstream)
    joined = content_chunks(client, upstream, coalesce_ms=100)
    assert "".join(plain) == "".join(joined) == "".join(WORDS)
    assert len(plain) == len(WORDS)
    # 40 words 5 ms apart are about 200 ms of stream: a handful of 100 ms windows
    assert len(joined) < len(WORDS) / 2
    stored = httpx.get(f"{parley.url}/v1/conversations").json()["data"][0]
    body = httpx.get(f"{parley.url}/v1/conversations/{stored['id']}").json()
    assert body["messages"][-1]["content"] == "".join(WORDS)


def test_a_coalesce_window_out_of_range_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            stream_options={"coalesce_ms": 5000},  # type: ignore[typeddict-item]
        )


@pytest.mark.anyio
async def test_a_quiet_stream_is_flushed_by_the_timer_and_order_is_kept() -> None:
    written: list[tuple[Kind, str]] = []

    async def write(kind: Kind, text: str) -> None:
        written.append((kind, text))

    coalescer = Coalescer(0.05, write)
    await coalescer.add("reasoning_content", "thinking ")
    await coalescer.add("reasoning_content", "hard")
    await coalescer.add("content", "An")
    await coalescer.add("content", "swer")
    assert written == []  # held within the window
    await until(lambda: len(written) >= 2)  # nothing more comes: the timer sends what is held
    assert written == [("reasoning_content", "thinking hard"), ("content", "Answer")]
    await coalescer.add("content", "!")
    await coalescer.flush()  # another event (or the end) flushes at once
    assert written[-1] == ("content", "!")
    coalescer.close()
