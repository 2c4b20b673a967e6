"""Slow or greedy clients cannot use up the server (issue 17, item 2).

A real server with small limits; raw sockets play the slow clients (a body at a byte a
second, headers that never end), the official client plays everyone else.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

BODY = b'{"model": "fast", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        server={
            "max_in_flight": 3,
            "max_in_flight_per_key": 2,
            "body_timeout_seconds": 2,
            "header_timeout_seconds": 1,
            "keepalive_seconds": 1.0,
        },
    )
    with ParleyServer(tmp_path_factory.mktemp("slow-clients"), config) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("mallory", "alice")}


def _client(server: ParleyServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=20)


def _connect(server: ParleyServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _slow_body(server: ParleyServer, key: str) -> socket.socket:
    """A chat request whose headers arrive and whose body does not (yet)."""
    sock = _connect(server)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    )
    sock.sendall(head.encode() + BODY[:1])
    return sock


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_slow_bodies_hold_no_slot_and_time_out(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    slow = [_slow_body(server, keys["mallory"]) for _ in range(5)]
    try:
        time.sleep(0.3)
        upstream.queue_text("hello alice")
        reply = _client(server, keys["alice"]).chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "hello alice"

        started = time.monotonic()
        answers = [_answer(sock) for sock in slow]
        assert time.monotonic() - started < 5
    finally:
        for sock in slow:
            sock.close()
    # two bodies may be arriving for one key (its in-flight cap); the rest wait for none
    statuses = sorted(answer[9:12] for answer in answers)
    assert statuses == [b"408", b"408", b"429", b"429", b"429"], answers
    for answer in answers:
        assert b"connection: close" in answer.lower()
        assert b"request_timeout" in answer or b"too_many_in_flight" in answer


def test_one_key_cannot_take_every_slot(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    mallory = _client(server, keys["mallory"])
    for _ in range(2):
        upstream.queue_text(*["tick "] * 40, delay=0.1)  # 4 s each
    streams = [
        mallory.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "go"}], stream=True
        )
        for _ in range(2)
    ]
    drained = [threading.Thread(target=lambda s=s: list(s)) for s in streams]
    for thread in drained:
        thread.start()
    try:
        with pytest.raises(openai.RateLimitError) as caught:
            mallory.chat.completions.create(
                model="fast", messages=[{"role": "user", "content": "a third"}]
            )
        assert caught.value.response.headers["retry-after"] == "1"
        body = caught.value.body
        assert isinstance(body, dict)
        assert body["code"] == "too_many_in_flight"

        upstream.queue_text("alice still gets in")
        reply = _client(server, keys["alice"]).chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "alice still gets in"
    finally:
        for thread in drained:
            thread.join(timeout=30)


@pytest.mark.parametrize(
    "opening",
    [
        b"",  # connects and says nothing
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",  # never ends
    ],
)
def test_a_connection_whose_headers_do_not_arrive_is_closed(
    server: ParleyServer, opening: bytes
) -> None:
    sock = _connect(server)
    try:
        sock.sendall(opening)
        started = time.monotonic()
        while not _closed(sock):
            assert time.monotonic() - started < 3, "the server kept the connection"
            if opening:
                sock.sendall(b"a")  # a header that grows a byte every 0.2 s
            time.sleep(0.2)
    finally:
        sock.close()


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)
