"""The stream writer (api/chunk_writer.py): events in, chat.completion.chunk frames out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parley.api.chunk_writer import ChunkWriter, Ending, closing
from parley.api.sse import ChunkEncoder
from parley.api.statuses import OPENAI
from parley.errors import ProviderError
from parley.events import (
    Done,
    Event,
    Restart,
    Status,
    StreamError,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from parley.messages import Usage


class Client:
    """What the client was sent: each frame's JSON, and whether the response ended."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.ended = False

    async def write(self, data: bytes | None) -> None:
        if data is None:
            self.ended = True
        else:
            self.frames.append(data)

    def chunks(self) -> list[dict[str, Any]]:
        lines = b"".join(self.frames).decode().split("\n")
        return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def writer(client: Client, *, legacy: bool = False, include_usage: bool = True) -> ChunkWriter:
    encoder = ChunkEncoder(
        completion_id="chatcmpl-1",
        created=1,
        model="m",
        parley={"message_id": "msg_1"},
        message_id="msg_1",
        include_usage=include_usage,
    )
    return ChunkWriter(
        encoder,
        client.write,
        dialect=OPENAI,
        legacy=legacy,
        include_usage=include_usage,
        header=(),
        ending=lambda: Ending({"cost": 0}, None, None),
    )


async def send(stage: Any, *events: Event) -> None:
    for event in events:
        await stage(event)


@pytest.mark.anyio
async def test_nothing_is_sent_before_output_and_a_first_failure_is_an_http_error() -> None:
    client = Client()
    chunks = writer(client)
    failure = ProviderError("upstream down", provider="p")
    await send(chunks, Status("thinking", "1"), UsageEvent(Usage(1, 1)), StreamError(failure))
    assert client.frames == []
    assert client.ended
    assert chunks.failed_first is failure
    assert not chunks.started


@pytest.mark.anyio
async def test_a_reply_is_the_role_then_text_then_the_finish_with_usage() -> None:
    client = Client()
    chunks = writer(client)
    await send(
        chunks,
        Status("thinking", "1"),  # held back: the 200 waits for output
        TextDelta("Hel"),
        TextDelta("lo"),
        UsageEvent(Usage(3, 2)),
        Done("end_turn"),
    )
    sent = client.chunks()
    assert sent[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in sent if c["choices"])
    assert text == "Hello"
    finish = [c for c in sent if c["choices"] and c["choices"][0].get("finish_reason")]
    assert finish[0]["choices"][0]["finish_reason"] == "stop"
    assert sent[-1]["usage"]["prompt_tokens"] == 3
    assert client.ended
    assert b"".join(client.frames).endswith(b"data: [DONE]\n\n")


@pytest.mark.anyio
async def test_a_legacy_request_gets_its_call_as_function_call() -> None:
    client = Client()
    chunks = writer(client, legacy=True)
    await send(
        chunks,
        ToolCallDelta(0, "call_1", "lookup", '{"q":'),
        ToolCallDelta(0, None, None, '"x"}'),
        Done("tool_use"),
    )
    deltas = [c["choices"][0]["delta"] for c in client.chunks() if c["choices"]]
    calls = [d["function_call"] for d in deltas if "function_call" in d]
    assert calls == [{"name": "lookup", "arguments": '{"q":'}, {"arguments": '"x"}'}]
    finish = [c["choices"][0]["finish_reason"] for c in client.chunks() if c["choices"]]
    assert "function_call" in finish


@pytest.mark.anyio
async def test_a_restart_after_output_says_what_to_drop() -> None:
    client = Client()
    chunks = writer(client)
    await send(chunks, TextDelta("partial"), Restart("retry", 1, "m", 0.5, True, 0))
    restart = client.chunks()[-1]["parley"]["restart"]
    assert restart == {
        "reason": "retry",
        "attempt": 1,
        "model": "m",
        "delay_seconds": 0.5,
        "clear": True,
        "keep_content_chars": 0,
    }


@pytest.mark.anyio
async def test_a_failing_stage_ends_the_response() -> None:
    client = Client()

    async def broken(event: Event) -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        await closing(broken, client.write)(TextDelta("x"))
    assert client.ended
