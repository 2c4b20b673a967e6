"""When the server is saturated, the key using the most is refused, not whoever comes
next (issue 17: one key's streams made another key's chats answer 503), and a key's
other requests are capped too. A real server with small limits; key A plays the heavy
user, key B everyone else.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        server={
            "max_in_flight": 4,
            "max_in_flight_per_key": 8,  # above max_in_flight: the fairness rules decide
            "max_other_in_flight_per_key": 2,
            "max_loop_lag_ms": 1,  # any stream at full speed makes the loop this late
            "keepalive_seconds": 1.0,
        },
    )
    # its own process: the loop's lateness must be the server's, not the reading threads'
    # of this test sharing an interpreter lock with it
    with ParleyServer(tmp_path_factory.mktemp("fairness"), config, process=True) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture
def replies(upstream: MockOpenAI) -> Iterator[MockOpenAI]:
    """Every request the script does not cover gets a short reply."""
    upstream.fallback = Reply(frames=text_frames(["ok"]))
    try:
        yield upstream
    finally:
        upstream.fallback = None


def _client(server: ParleyServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


def _chat(server: ParleyServer, key: str) -> httpx.Response:
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    with server.client(key, timeout=60) as http:
        return http.post("/chat/completions", json=body)


@contextlib.contextmanager
def _streams(server: ParleyServer, key: str, count: int) -> Iterator[list[threading.Thread]]:
    """``count`` streams of ``key``, each read to its end on a thread of its own (and
    waited for on leaving)."""
    with _client(server, key) as client:
        threads = _opened(client, count)
        try:
            yield threads
        finally:
            for thread in threads:
                thread.join(timeout=60)


def _opened(client: openai.OpenAI, count: int) -> list[threading.Thread]:
    opened = [
        client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": f"go {n}"}], stream=True
        )
        for n in range(count)
    ]
    threads = [threading.Thread(target=lambda s=s: list(s)) for s in opened]
    for thread in threads:
        thread.start()
    return threads


def _refused(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["retry-after"] == "1"
    if status == 429:
        assert response.json()["error"]["code"] == "too_many_in_flight"


def test_at_the_limit_the_heavy_key_is_refused_and_a_light_one_admitted(
    server: ParleyServer, keys: dict[str, str], replies: MockOpenAI
) -> None:
    for _ in range(4):
        replies.queue_text(*["tick "] * 30, delay=0.1)  # 3 s each
    with _streams(server, keys["alice"], 4):  # every slot of max_in_flight
        _refused(_chat(server, keys["alice"]), 429)  # before: 503, like everyone
        answer = _chat(server, keys["bob"])  # before: 503
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "ok"


def test_while_the_loop_is_late_the_heavy_key_is_refused_and_a_light_one_admitted(
    server: ParleyServer, keys: dict[str, str], replies: MockOpenAI
) -> None:
    for _ in range(4):  # as fast as the server relays them: the loop runs late
        replies.queue_text(*["x" * 50] * 20_000)
    rounds: list[tuple[int, int]] = []
    with _streams(server, keys["alice"], 4) as streams:
        deadline = time.monotonic() + 30
        while any(t.is_alive() for t in streams) and time.monotonic() < deadline:
            alice = _chat(server, keys["alice"])
            if alice.status_code != 200:  # refused while the loop lags
                _refused(alice, 429)  # before: 503
                bob = _chat(server, keys["bob"])  # right after: before, 503 too
                rounds.append((alice.status_code, bob.status_code))
                if len(rounds) == 3:
                    break
            time.sleep(0.05)
    assert rounds, "the loop never ran late enough to refuse anyone"
    assert all(bob == 200 for _, bob in rounds), rounds


def _slow_body(server: ParleyServer, key: str) -> socket.socket:
    """A POST whose headers arrive and whose body does not: in flight until it ends."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    head = (
        "POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{"
    )
    sock.sendall(head.encode())
    return sock


def test_a_key_s_other_requests_are_capped(server: ParleyServer, keys: dict[str, str]) -> None:
    held = [_slow_body(server, keys["alice"]) for _ in range(2)]
    try:
        time.sleep(0.3)
        with server.client(keys["alice"]) as alice:
            refused = alice.get("/conversations")  # before: 200
            _refused(refused, 429)
            assert "2 requests in flight" in refused.json()["error"]["message"]
            upload = alice.post("/memories", json={"text": "one more"})
            _refused(upload, 429)
            assert upload.headers["connection"] == "close"  # its body is not read
        with server.client(keys["bob"]) as bob:
            assert bob.get("/conversations").status_code == 200
            assert bob.get("/memories").status_code == 200
    finally:
        for sock in held:
            sock.close()
    with server.client(keys["alice"]) as alice:
        deadline = time.monotonic() + 10
        while alice.get("/conversations").status_code == 429:  # until the server sees
            assert time.monotonic() < deadline  # the held requests go
            time.sleep(0.05)


def test_health_and_keyless_requests_are_not_capped(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    held = [_slow_body(server, keys["alice"]) for _ in range(2)]
    try:
        time.sleep(0.3)
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        # without a key: 401, never 429 (it is nobody's request to count)
        assert httpx.get(f"{server.url}/v1/conversations", timeout=10).status_code == 401
    finally:
        for sock in held:
            sock.close()


def test_keyless_loopback_use_has_the_overall_limit_alone(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    """With no key in existence every local client is the machine's one user, whatever
    key it sends (the OpenAI SDK always sends one; the benchmark sends "bench"): the
    per-key limits do not apply (before, each sent key had its own)."""
    config = server_config(
        upstream, server={"max_in_flight_per_key": 1, "max_other_in_flight_per_key": 1}
    )
    with ParleyServer(tmp_path, config) as keyless:
        upstream.queue_text(*["tick "] * 20, delay=0.1)  # 2 s
        with _streams(keyless, "bench", 1):
            upstream.queue_text("second")
            answer = _chat(keyless, "bench")  # before: 429 too_many_in_flight
            assert answer.status_code == 200, answer.text
            held = _slow_body(keyless, "bench")
            try:
                time.sleep(0.3)
                with keyless.client("bench") as http:
                    assert http.get("/conversations").status_code == 200
            finally:
                held.close()


def test_replies_whose_client_left_still_count_for_their_key(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    """A client that starts a reply and leaves (the reply goes on and is saved: here
    ``on_disconnect: continue``, as a named conversation's reply under the default)
    cannot start unbounded work: the running replies count against its key until they
    end."""
    config = server_config(
        upstream, server={"max_in_flight_per_key": 2, "on_disconnect": "continue"}
    )
    with ParleyServer(tmp_path, config) as parley:
        alice, bob = parley.create_key("alice"), parley.create_key("bob")
        with _client(parley, alice) as client:
            for n in range(2):
                upstream.queue_text(*["tick "] * 40, delay=0.1)  # 4 s each
                stream = client.chat.completions.create(
                    model="fast", messages=[{"role": "user", "content": f"go {n}"}], stream=True
                )
                next(iter(stream))
                stream.close()  # gone; the reply goes on
        time.sleep(0.5)  # the server sees them go
        _refused(_chat(parley, alice), 429)  # before: 200, and so on without end
        upstream.queue_text("for bob")
        assert _chat(parley, bob).status_code == 200
