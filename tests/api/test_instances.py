"""Several ``parley serve`` instances on one PostgreSQL database and one Redis: one reply
at a time per conversation across them, cancel from any instance, and the replies of an
instance killed with SIGKILL found interrupted by the others (``parley.cluster``,
``conversations/sessions.py``, ``conversations/recovery.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.api.test_sessions import slow_reply, started_conversation, stream_in_thread
from tests.conftest import server_config
from tests.support import postgres
from tests.support.proxy import proxied
from tests.support.redis import running_redis
from tests.support.server import ParleyServer
from tests.support.sse import (
    WORDS,
    body,
    events,
    first_events,
    new_conversation,
    resume,
    text_of,
)
from tests.support.waiting import wait_until

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

LEASE_SECONDS = 1.0


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


def instance(directory: Path, upstream: MockOpenAI, database: str, redis: str) -> ParleyServer:
    config = server_config(
        upstream,
        database={"url": database},
        redis={"url": redis, "lease_seconds": LEASE_SECONDS},
        tools={"approval": {"current_time": "ask"}, "approval_ttl_seconds": 60},
    )
    return ParleyServer(directory, config, process=True)


@pytest.fixture
def two(tmp_path: Path, upstream: MockOpenAI, redis_url: str) -> Iterator[list[ParleyServer]]:
    """Instances A and B on one database and one Redis."""
    database = postgres.new_database()
    servers = [instance(tmp_path / name, upstream, database, redis_url) for name in "ab"]
    with servers[0], servers[1]:
        yield servers


def client(server: ParleyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0)


def branch(server: ParleyServer, conversation_id: str) -> list[dict[str, Any]]:
    url = f"{server.url}/v1/conversations/{conversation_id}"
    messages: list[dict[str, Any]] = httpx.get(url).json()["messages"]
    return messages


def reply_on_a(a: ParleyServer, upstream: MockOpenAI) -> tuple[str, dict[str, Any], Any]:
    """A conversation whose slow reply is streaming from A (its first words read)."""
    conversation_id = started_conversation(client(a), upstream)
    slow_reply(upstream)
    out: dict[str, Any] = {}
    thread = stream_in_thread(client(a), conversation_id, out)
    wait_until(lambda: out.get("so_far", "").startswith("w0 "), what="A's first words")
    return conversation_id, out, thread


def test_a_message_on_b_supersedes_the_reply_running_on_a(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    conversation_id, out, thread = reply_on_a(a, upstream)
    upstream.queue_text("the newer answer, from B")
    newer = client(b).chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "never mind"}],
        extra_body={"conversation_id": conversation_id},
    )
    thread.join(10)
    assert newer.choices[0].message.content == "the newer answer, from B"
    assert out["error"].code == "superseded"
    messages = branch(a, conversation_id)
    assert [(m["role"], m["status"]) for m in messages] == [
        ("user", "complete"),
        ("assistant", "complete"),
        ("user", "complete"),
        ("assistant", "interrupted"),
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert messages[3]["content"] == out["text"]  # what A's client saw is what was kept
    assert messages[5]["content"] == "the newer answer, from B"


def test_cancel_sent_to_b_stops_the_reply_on_a(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    conversation_id, out, thread = reply_on_a(a, upstream)
    cancelled = httpx.post(f"{b.url}/v1/conversations/{conversation_id}/cancel").json()
    thread.join(10)
    assert cancelled["cancelled"] is True
    assert out["error"].code == "cancelled"
    [*_, last] = branch(b, conversation_id)
    assert last["id"] == cancelled["message_id"]
    assert (last["status"], last["content"]) == ("interrupted", out["text"])
    # nothing runs now: a cancel finds nothing, and the conversation takes a new message
    assert httpx.post(f"{b.url}/v1/conversations/{conversation_id}/cancel").json() == {
        "id": conversation_id,
        "object": "conversation.cancellation",
        "cancelled": False,
        "message_id": None,
    }


def test_an_approval_decided_on_b_resumes_the_turn_paused_on_a(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    upstream.queue_tool_calls([("call_t", "current_time", "{}")])
    paused = client(a).chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "what time is it?"}],
        tools=["current_time"],  # type: ignore[list-item]
    )
    extra = (paused.model_extra or {})["parley"]
    assert [p["id"] for p in extra["pending_approvals"]] == ["call_t"]
    conversation_id = extra["conversation_id"]
    upstream.queue_text("It is time.")
    decided = httpx.post(
        f"{b.url}/v1/conversations/{conversation_id}/approvals",
        json={"decisions": [{"tool_call_id": "call_t", "decision": "approve"}]},
        timeout=30,
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["choices"][0]["message"]["content"] == "It is time."
    [tool_result] = [m for m in upstream.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_result["tool_call_id"] == "call_t"  # the call ran, on B
    assert branch(a, conversation_id)[-1]["status"] == "complete"


def test_the_reply_of_a_killed_instance_is_found_interrupted(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    conversation_id, out, thread = reply_on_a(a, upstream)
    wait_until(lambda: branch(b, conversation_id)[-1]["content"], what="A's first checkpoint")
    os.kill(a.process.pid, signal.SIGKILL)
    thread.join(10)
    seen = out["so_far"]

    def cut_off() -> bool:
        return branch(b, conversation_id)[-1]["status"] == "interrupted"

    # the lease lapses (1 s), then B's sweep (every 1 s, rows idle for 1 s) finds it
    wait_until(cut_off, timeout=10, what="B marked A's reply interrupted")
    last = branch(b, conversation_id)[-1]
    assert last["content"]
    assert seen.startswith(last["content"])  # the last checkpoint: what the client saw
    upstream.queue_text("regenerated on B")
    again = client(b).chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "go on"}],
        extra_body={"conversation_id": conversation_id},
    )
    assert again.choices[0].message.content == "regenerated on B"


def test_ready_fails_while_redis_is_down_and_health_does_not(
    tmp_path: Path, upstream: MockOpenAI
) -> None:
    with running_redis(tmp_path / "redis") as redis:
        server = instance(tmp_path / "a", upstream, postgres.new_database(), redis)
        with server:
            ready = httpx.get(f"{server.url}/ready")
            assert (ready.status_code, ready.json()["redis"]) == (200, "ok")
            stop_redis(redis)
            down = httpx.get(f"{server.url}/ready")
            assert down.status_code == 503
            assert down.json()["status"] == "not_ready"
            assert down.json()["redis"].startswith("failed")
            assert down.json()["database"] == "ok"
            assert httpx.get(f"{server.url}/health").status_code == 200


def stop_redis(url: str) -> None:
    """Ask the Redis at ``url`` to shut down (its process ends)."""
    import redis

    client = redis.Redis.from_url(url)
    with contextlib.suppress(redis.exceptions.ConnectionError):  # it hangs up as it goes
        client.shutdown(nosave=True)


def test_a_client_that_left_a_resumes_on_b_and_gets_the_rest(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    upstream.queue(Reply(frames=text_frames(WORDS), delay=0.05))
    conversation_id = new_conversation(a)
    before = first_events(a, body(conversation_id), 4)
    assert before[-1].id is not None
    rest = resume(b, before[-1].id)  # live, through Redis, while A still runs it
    assert rest[-1].done
    assert text_of(before) + text_of(rest) == "".join(WORDS)
    last = branch(b, conversation_id)[-1]
    assert (last["content"], last["status"]) == ("".join(WORDS), "complete")


def test_after_sigkill_a_resuming_client_gets_what_a_said_then_interrupted(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    upstream.queue(Reply(frames=text_frames(WORDS), delay=0.1))
    conversation_id = new_conversation(a)
    before = first_events(a, body(conversation_id), 3)
    wait_until(lambda: len(branch(b, conversation_id)[-1]["content"]) > 12, what="A went on")
    os.kill(a.process.pid, signal.SIGKILL)
    assert before[-1].id is not None
    rest = resume(b, before[-1].id)
    assert rest[-1].done
    assert rest[-2].json()["error"]["code"] == "interrupted"
    heard = text_of(before) + text_of(rest[:-2])
    assert len(heard) > len(text_of(before))  # what A said while the client was away
    assert "".join(WORDS).startswith(heard)
    last = branch(b, conversation_id)[-1]
    assert last["status"] == "interrupted"
    assert heard.startswith(last["content"])  # stored: A's last checkpoint


def test_the_same_idempotency_key_on_b_joins_the_stream_running_on_a(
    two: list[ParleyServer], upstream: MockOpenAI
) -> None:
    a, b = two
    upstream.queue(Reply(frames=text_frames(WORDS), delay=0.05))
    conversation_id = new_conversation(a)
    data, key = body(conversation_id), {"idempotency-key": f"join-{conversation_id}"}
    calls = len(upstream.requests)
    with httpx.stream("POST", f"{a.url}/v1/chat/completions", json=data, headers=key) as first:
        on_a = []
        for event in events(first):
            on_a.append(event)
            if len(on_a) == 3:
                break
        with httpx.stream(
            "POST", f"{b.url}/v1/chat/completions", json=data, headers=key, timeout=30
        ) as retry:
            assert retry.status_code == 200
            on_b = list(events(retry))
    assert on_b[-1].done
    assert on_b[: len(on_a)] == on_a  # the same stream, from its first event
    assert text_of(on_b) == "".join(WORDS)
    assert len(upstream.requests) == calls + 1  # one reply, not two


def test_a_usage_limit_holds_across_instances_under_concurrent_calls(
    tmp_path: Path, upstream: MockOpenAI, redis_url: str
) -> None:
    """60 tokens a day; every call is held at 14 or more while it runs (its estimate:
    4 for the message, 10 for the reply) and uses 3. Ten calls at once, five on each
    instance: at most four fit, whichever instance they reach (each instance alone
    would let four through: eight in all)."""
    database = postgres.new_database()
    limits = {"enabled": True, "default": {"tokens_per_day": 60}, "reserve_output_tokens": 10}
    servers = []
    for name in "ab":
        config = server_config(
            upstream,
            database={"url": database},
            redis={"url": redis_url, "lease_seconds": LEASE_SECONDS},
            interceptors={"usage_limits": limits},
        )
        servers.append(ParleyServer(tmp_path / name, config, process=True))
    for _ in range(10):
        upstream.queue_text("o", "k", " !", prompt_tokens=0, delay=0.3)

    def ask(server: ParleyServer) -> str:
        try:
            client(server).chat.completions.create(
                model="fast", messages=[{"role": "user", "content": "hi"}], max_tokens=10
            )
        except openai.RateLimitError as error:
            return str(error.code)
        return "answered"

    with servers[0], servers[1], ThreadPoolExecutor(10) as pool:
        outcomes = list(pool.map(ask, [servers[n % 2] for n in range(10)]))
    answered = outcomes.count("answered")
    assert 1 <= answered <= 4, outcomes
    assert outcomes.count("usage_limit_exceeded") == 10 - answered


def test_three_instances_behind_a_proxy_lose_nothing_acknowledged(
    tmp_path: Path, upstream: MockOpenAI, redis_url: str
) -> None:
    """Every reply a client was given is stored as it saw it, whichever instance gave
    it; the instance streaming a reply is killed, and the client resumes through the
    proxy on another."""
    database = postgres.new_database()
    servers = [instance(tmp_path / name, upstream, database, redis_url) for name in "abc"]
    with servers[0], servers[1], servers[2], proxied([s.port for s in servers]) as proxy:
        no_reuse = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
        front = openai.OpenAI(
            base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0, http_client=no_reuse
        )
        seen: dict[str, tuple[str, str]] = {}
        for n in range(9):
            upstream.queue_text(f"answer {n}")
            reply = front.chat.completions.create(
                model="fast", messages=[{"role": "user", "content": f"question {n}"}]
            )
            conversation_id = (reply.model_extra or {})["parley"]["conversation_id"]
            seen[conversation_id] = (f"question {n}", str(reply.choices[0].message.content))
        assert set(proxy.served) == {s.port for s in servers}  # every instance answered

        upstream.queue(Reply(frames=text_frames(WORDS), delay=0.1))
        conversation_id = new_conversation(proxy)
        before = first_events(proxy, body(conversation_id), 3)
        [streaming] = [s for s in servers if s.port == proxy.served[-1]]
        os.kill(streaming.process.pid, signal.SIGKILL)
        assert before[-1].id is not None
        rest = resume(proxy, before[-1].id)
        assert rest[-1].done
        assert rest[-2].json()["error"]["code"] == "interrupted"

        for conversation_id, (question, answer) in seen.items():
            stored = httpx.get(f"{proxy.url}/v1/conversations/{conversation_id}").json()
            said = [(m["role"], m["content"], m["status"]) for m in stored["messages"]]
            assert said == [("user", question, "complete"), ("assistant", answer, "complete")]
