"""Regular expressions that backtrack without end cannot stall the server (issue 17).

``(a+)+$`` against 30 ``a`` s and a ``!`` takes Python's ``re`` minutes (10 s at 27, and
each ``a`` doubles it), all of it holding the GIL. The ``regex`` module that Parley now
uses answers that one at once, but not ``(a|aa)+$`` against 40 ``a`` s: there the
deadline has to cut it short. Each place where a key holder, a model or the operator
supplies a pattern is tried here, against a real server, while another thread keeps
asking ``/health``: the answer must stay quick, and the request with the pattern must
end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.probe import HealthProbe
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

CLASSIC = "(a+)+$"
EVIL = "(a|aa)+$"
VICTIM = "a" * 40 + "!"


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    data = tmp_path_factory.mktemp("backtracking")
    config = server_config(upstream, tools={"default_tools": []})
    # in a process of its own: the stalls HealthProbe sees must be the server's own
    with ParleyServer(data, config, process=True) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def _assistant(server: ParleyServer, **fields: Any) -> str:
    response = httpx.post(f"{server.url}/v1/assistants", json=fields, timeout=10)
    assert response.status_code in (200, 201), response.text
    name: str = response.json()["name"]
    return name


def _chat(client: openai.OpenAI, text: str, **extra: Any) -> str:
    reply = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": text}], extra_body=extra
    )
    return reply.choices[0].message.content or ""


def test_a_regex_rule_that_backtracks_is_cut_short(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    name = _assistant(
        server,
        name="backtracker",
        regex_rules=[
            {"pattern": CLASSIC, "replacement": "x", "roles": ["user", "assistant"]},
            {"pattern": EVIL, "replacement": "x", "roles": ["user", "assistant"]},
        ],
    )
    upstream.queue_text(VICTIM)

    with HealthProbe(server) as probe:
        started = time.monotonic()
        answer = _chat(client, VICTIM, assistant=name)
        took = time.monotonic() - started

    assert answer == VICTIM  # the rule ran out of time and was skipped
    assert took < 10
    assert probe.worst < 1.0, f"/health waited {probe.worst:.1f} s"
    assert "ran out of time and was skipped" in server.log()


def test_the_rules_of_a_turn_share_one_budget_however_many_parts_and_messages(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    """The stall hunt's requests: a time limit per text part made one user message of
    100 parts (6.8 KB) freeze the server for 11.5 s, and a history of 20 user messages
    for 2.2 s. A turn's rules now share one budget."""
    rule = {"pattern": EVIL, "replacement": "x", "roles": ["user"]}
    name = _assistant(server, name="many-parts", regex_rules=[rule])
    parts: Any = [{"type": "text", "text": VICTIM}] * 100
    history: Any = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": VICTIM} for i in range(39)
    ]
    # keyless use is one user: right after a stall of its own making, admission control
    # may tell it to retry (a 503 with Retry-After, as the SDK expects)
    patient = client.with_options(max_retries=3)
    with HealthProbe(server) as probe:
        for messages in ([{"role": "user", "content": parts}], history):
            upstream.queue_text("ok")
            reply = patient.chat.completions.create(
                model="fast", messages=messages, extra_body={"assistant": name}
            )
            assert reply.choices[0].message.content == "ok"
    assert probe.worst < 1.0, f"/health waited {probe.worst:.1f} s"
    sent = upstream.requests[-1]["messages"]
    assert sent[-1]["content"] == VICTIM  # out of time: skipped, as one rule always was


def test_a_lorebook_keyword_that_backtracks_does_not_match(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    lore = {"keywords": [EVIL], "use_regex": True, "content": "LORE"}
    name = _assistant(server, name="lore", transformers={"lorebook": [lore]})
    upstream.queue_text("fine")

    with HealthProbe(server) as probe:
        assert _chat(client, VICTIM, assistant=name) == "fine"

    assert probe.worst < 1.0, f"/health waited {probe.worst:.1f} s"
    sent = upstream.requests[-1]["messages"]
    assert all("LORE" not in str(message.get("content")) for message in sent)


def test_workspace_search_with_a_regex_that_backtracks_runs_out_of_time(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    lines = "\n".join([VICTIM] * 200)
    upstream.queue_tool_calls([("w1", "workspace_write", _json(path="a.txt", content=lines))])
    upstream.queue_tool_calls([("s1", "workspace_search", _json(query=EVIL, regex=True))])
    upstream.queue_text("searched")

    with HealthProbe(server) as probe:
        started = time.monotonic()
        answer = _chat(client, "search", tools=["workspace_write", "workspace_search"])
        took = time.monotonic() - started

    assert answer == "searched"
    assert took < 15
    assert probe.worst < 1.0, f"/health waited {probe.worst:.1f} s"
    result = upstream.requests[-1]["messages"][-1]
    assert result["role"] == "tool"
    assert "ran out of time" in result["content"]


def test_patterns_that_cost_too_much_to_compile_are_refused_when_saved(
    server: ParleyServer,
) -> None:
    for pattern, why in [
        ("((a{100}){100}){100}", "expand to 1,000,000 copies"),
        ("a" * 1001, "at most 1000"),
    ]:
        started = time.monotonic()
        response = httpx.post(
            f"{server.url}/v1/assistants",
            json={"name": "costly", "regex_rules": [{"pattern": pattern}]},
            timeout=10,
        )
        assert time.monotonic() - started < 2
        assert response.status_code == 400, response.text
        assert why in response.text


def _json(**fields: Any) -> str:
    return json.dumps(fields)


def test_an_operator_pattern_that_backtracks_fails_closed(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    config = server_config(
        upstream, interceptors={"sensitive": {"enabled": True, "patterns": [EVIL]}}
    )
    server = ParleyServer(tmp_path / "sensitive", config, process=True)
    with server as parley, HealthProbe(parley) as probe:
        client = openai.OpenAI(base_url=f"{parley.url}/v1", api_key="x", max_retries=0)
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            _chat(client, VICTIM)
        took = time.monotonic() - started

    assert took < 5
    assert probe.worst < 1.0, f"/health waited {probe.worst:.1f} s"
    assert caught.value.status_code >= 400
    assert upstream.requests == []  # nothing reached the model unchecked
