"""Server-Sent Events out: the chunk encoder and a raw ASGI streaming response.

``ChunkEncoder`` pre-encodes everything in a chunk that does not change, so a text
delta costs one small ``orjson.dumps`` and two byte concatenations. ``EventStream``
watches for the client going away while it streams (not only when a write fails), so a
disconnect is noticed at once even while the upstream is silent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from parley.api.statuses import AgentStatus
from parley.events import Logprobs
from parley.messages import Usage

KEEPALIVE = b": ping\n\n"
KEEPALIVE_LINE = b": ping\n"
"""The keep-alive of a stream whose events carry ids: a comment line with no blank line
after it. The official openai SDK's decoder keeps the last event id (as the SSE spec
says) and so turns every blank line after one into an event with empty data, which it
then fails to parse as JSON: a ``: ping`` followed by a blank line broke its streams.
A comment line alone is skipped by every line-based reader and ends no event."""
DONE = b"data: [DONE]\n\n"


def usage_to_openai(usage: Usage) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_input_tokens:
        wire["prompt_tokens_details"] = {"cached_tokens": usage.cached_input_tokens}
    if usage.reasoning_tokens:
        wire["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return wire


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


_NO_LOGPROBS = b',"logprobs":null'


class ChunkEncoder:
    """Encodes ``chat.completion.chunk`` frames for one response."""

    def __init__(
        self,
        *,
        completion_id: str,
        created: int,
        model: str,
        parley: dict[str, Any],
        message_id: str,
        include_usage: bool,
    ) -> None:
        head = orjson.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
        )
        self._prefix = b"data: " + head[:-1] + b',"choices":[{"index":0,"delta":'
        self._parley = parley
        self._message_id = orjson.dumps(message_id)
        self._usage_null = b',"usage":null' if include_usage else b""
        self._head = head
        self._tails: dict[tuple[int | None, bytes], bytes] = {}

    def _tail(self, status: int | None, finish: bytes) -> bytes:
        key = (status, finish)
        tail = self._tails.get(key)
        if tail is None:
            tail = (
                _NO_LOGPROBS
                + b',"finish_reason":'
                + finish
                + b"}]"
                + self._usage_null
                + b',"parley":'
                + orjson.dumps(self._parley)
                + b',"status":'
                + (b"null" if status is None else str(int(status)).encode())
                + b',"message_type":1,"message_id":'
                + self._message_id
                + b"}\n\n"
            )
            self._tails[key] = tail
        return tail

    def delta(self, delta: dict[str, Any], status: int | None = AgentStatus.LLM_NEW_TOKEN) -> bytes:
        return self._prefix + orjson.dumps(delta) + self._tail(status, b"null")

    def logprobs(self, logprobs: Logprobs, status: int | None = AgentStatus.LLM_NEW_TOKEN) -> bytes:
        """A chunk with an empty delta carrying the log probabilities of the tokens
        sent before it."""
        entries = {"content": list(logprobs.content), "refusal": list(logprobs.refusal)}
        tail = self._tail(status, b"null")[len(_NO_LOGPROBS) :]
        return self._prefix + b"{}" + b',"logprobs":' + orjson.dumps(entries) + tail

    def finish(
        self,
        finish_reason: str,
        extra: dict[str, Any] | None = None,
        status: int | None = AgentStatus.LLM_END,
        content: str | None = None,
    ) -> bytes:
        """The last chunk; ``content``: the whole answer again (Chatchat's
        agent_finish)."""
        if extra:
            self._parley = {**self._parley, **extra}
            self._tails.clear()
        delta = b"{}" if content is None else orjson.dumps({"content": content})
        return self._prefix + delta + self._tail(status, orjson.dumps(finish_reason))

    def progress(
        self,
        status: int | None,
        parley: dict[str, Any],
        top: dict[str, Any] | None = None,
        *,
        delta: dict[str, Any] | None = None,
    ) -> bytes:
        """A chunk that reports progress in the extension fields (``parley`` merged into
        the response's own, plus Chatchat's top-level fields), its delta empty unless
        given."""
        chunk = orjson.loads(self._head)
        choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": None}
        chunk["choices"] = [choice]
        if self._usage_null:
            chunk["usage"] = None
        chunk["parley"] = {**self._parley, **parley}
        chunk["status"] = status
        chunk["message_type"] = 1
        chunk["message_id"] = orjson.loads(self._message_id)
        if top:
            chunk.update(top)
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def usage(self, usage: Usage) -> bytes:
        return (
            b"data: "
            + self._head[:-1]
            + b',"choices":[],"usage":'
            + orjson.dumps(usage_to_openai(usage))
            + b',"parley":'
            + orjson.dumps(self._parley)
            + b',"message_id":'
            + self._message_id
            + b"}\n\n"
        )

    def error(self, message: str, type_: str, code: str | None) -> bytes:
        payload = {
            "error": {"message": message, "type": type_, "param": None, "code": code},
            "parley": self._parley,
            "status": int(AgentStatus.ERROR),
            "message_id": orjson.loads(self._message_id),
        }
        return b"data: " + orjson.dumps(payload) + b"\n\n"


class EventStream(Response):
    """A ``text/event-stream`` response driven by a generation's sink.

    Nothing is sent until the first frame: ``first_failure`` turns a failure before it
    into a plain JSON error response with its own status. Keep-alive comments go out
    when the stream is quiet, and the client going away is noticed at once (not only
    when a write fails): ``on_disconnect`` runs then.
    """

    def __init__(
        self,
        run: Callable[[Callable[[bytes | None], Awaitable[None]]], None],
        first_failure: Callable[[], Response | None],
        on_disconnect: Callable[[], None],
        keepalive_seconds: float,
        headers: Sequence[tuple[bytes, bytes]] = (),
        keepalive: bytes = KEEPALIVE,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._start = {**_START, "headers": [*_START["headers"], *headers]} if headers else _START
        self._run = run
        self._first_failure = first_failure
        self._on_disconnect = on_disconnect
        self._keepalive = keepalive_seconds
        self._ping = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        started = False
        last_write = loop.time()

        async def write(frame: bytes | None) -> None:
            """Send a frame; ``None`` ends the stream (or, before any frame, fails it)."""
            nonlocal started, last_write
            if finished.done():
                return
            if frame is None:
                if not started:
                    failure = self._first_failure()
                    if failure is not None:
                        await failure(scope, receive, send)
                        finished.set_result(None)
                        return
                    await send(self._start)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                finished.set_result(None)
                return
            if not started:
                started = True
                await send(self._start)
            last_write = loop.time()
            await send({"type": "http.response.body", "body": frame, "more_body": True})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not finished.done():
                finished.set_result(None)
                self._on_disconnect()

        async def ping() -> None:
            while True:
                await asyncio.sleep(max(0.01, last_write + self._keepalive - loop.time()))
                if started and loop.time() - last_write >= self._keepalive:
                    await write(self._ping)

        watcher = asyncio.create_task(watch())
        pinger = asyncio.create_task(ping()) if self._keepalive > 0 else None
        try:
            self._run(write)
            await finished
        finally:
            watcher.cancel()
            if pinger is not None:
                pinger.cancel()


_START: dict[str, Any] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    ],
}
