"""Fuzzing every operation of the served OpenAPI schema with schemathesis (issue 17, item 8).

One real server on loopback (a mock upstream that always answers) with keys of two
owners, alice (A) and bob (B), and an admin. A's objects are made first: a
conversation, an assistant, a knowledge base with a document, a memory, each holding a
secret. Then, for every operation of ``/openapi.json``, cases are generated from the
schema (valid and invalid ones) and sent over HTTP, and:

- without a key, or with a garbage one, nothing but ``/health`` answers anything but 401;
- with B's key and A's ids planted in the path, query and body, nothing answers 2xx
  for an id in the path, no answer holds any of A's secrets, and afterwards A reads
  every object exactly as before;
- with A's key (the admin's for the admin routes), A's ids planted in half the cases,
  no answer is a 5xx and every answer conforms to the schema: documented status,
  content type, headers and body.

Generation is deterministic (derandomized, seeded, no example database) and bounded
(``EXAMPLES``): the whole module takes about a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from tests.conftest import server_config
from tests.support.fuzzing import (
    SECRET,
    Victim,
    auth,
    every_other,
    make_victim,
    plant,
    snapshot,
)
from tests.support.server import ParleyServer

from parley.api.errors import is_anthropic_path, is_chatchat_path
from parley.api.idempotency import NOT_COVERED
from parley.app import create_app
from parley.settings import Settings
from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

PUBLIC = frozenset({"/health", "/ready", "/v1/session"})
"""Operations that need no key (``/v1/session`` is how a browser gives one: a wrong key
in its body is 401, a request without a cookie is simply not signed in)."""
ADMIN_PATHS = ("/v1/admin/", "/v1/audit", "/v1/usage")
"""Operations fuzzed with the admin's key (admins see more: that shape is fuzzed too)."""
if os.environ.get("PYTEST_XDIST_WORKER"):
    # schemathesis's generated cases are not dispatched by pytest-xdist (9 of this
    # module's 282 tests would run): an error, not a quiet pass
    pytest.fail("this module runs in one process: add -p no:xdist (scripts/test.sh does)")
SEED = 17
EXAMPLES = {"strangers": 3, "other_owner": 6, "owner": 12}
"""Cases per operation in each test: about 60 seconds in all on 2 cores."""
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
TIMEOUT = 30


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def fuzz_upstream() -> Iterator[MockOpenAI]:
    with MockOpenAI() as mock:
        mock.fallback = Reply(frames=text_frames(["a fuzzed reply"]))
        yield mock


@pytest.fixture(scope="module")
def server(
    fuzz_upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    # MCP servers the admin adds in a test below are on loopback, where nothing listens
    mcp = {"url_allow_hosts": ["127.0.0.1"]}
    config = server_config(fuzz_upstream, knowledge={"embedder": "none"}, mcp=mcp)
    with ParleyServer(tmp_path_factory.mktemp("fuzz"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {
        "alice": server.create_key("alice"),
        "bob": server.create_key("bob"),
        "admin": server.create_key("root", "--admin"),
    }


@pytest.fixture(scope="module")
def victim(server: ParleyServer, keys: dict[str, str]) -> Victim:
    return make_victim(server, keys["alice"])


@pytest.fixture(scope="module")
def before(server: ParleyServer, keys: dict[str, str], victim: Victim) -> dict[str, str]:
    return snapshot(server, keys["alice"], victim)


def _document() -> dict[str, Any]:
    """The schema as the app builds it (a test below checks that the server serves the
    same). It is loaded at collection, before any server runs, so that each operation is
    a test of its own; the cases are sent to the real server."""
    app = create_app(Settings(data_dir=Path("/nonexistent/parley-schema-fuzz")))
    return app.openapi()


def _schema(*, coverage: bool) -> Any:
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {"deterministic": True, "database": "none"},
            "phases": {"coverage": {"enabled": coverage}, "stateful": {"enabled": False}},
        }
    )
    return schemathesis.openapi.from_dict(DOCUMENT, config=config)


DOCUMENT = _document()
quick = _schema(coverage=False)
"""Generated (fuzzing) cases only."""
full = _schema(coverage=True)
"""Also schemathesis's coverage cases: each constraint's boundaries and violations."""


def test_the_fuzzed_schema_is_the_served_one(server: ParleyServer) -> None:
    assert httpx.get(f"{server.url}/openapi.json").json() == DOCUMENT


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def _integers(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "integer":
            yield node
        for value in node.values():
            yield from _integers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _integers(value)


def test_the_schema_documents_keys_errors_and_answers() -> None:
    """What the fuzzer and client generators rely on, checked over the whole document
    (each was missing before: issue 17, item 8)."""
    schemes = DOCUMENT["components"]["securitySchemes"]
    assert schemes["bearer"] == {**schemes["bearer"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKey"] == {**schemes["apiKey"], "in": "header", "name": "x-api-key"}
    for method, path, operation in _operations():
        where = f"{method} {path}"
        responses = operation["responses"]
        names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
        if method in ("POST", "PATCH") and path not in NOT_COVERED:
            assert "Idempotency-Key" in names, where
            assert {"409", "422"} <= set(responses), where  # the key's own failures
        else:  # bad input is 400, as in OpenAI's API
            assert "422" not in responses, where
            assert "Idempotency-Key" not in names, where
        success = [status for status in responses if status.startswith("2")]
        assert len(success) == 1, where
        assert responses[success[0]].get("content"), where
        if path in PUBLIC:
            assert operation["security"] == [], where
            continue
        assert operation["security"], where
        shape = "ChatchatErrorResponse" if is_chatchat_path(path) else "ErrorResponse"
        if is_anthropic_path(path):
            shape = "AnthropicErrorResponse"
        for status in ("401", "403"):
            error = responses[status]["content"]["application/json"]["schema"]
            assert error == {"$ref": f"#/components/schemas/{shape}"}, where
        if operation.get("parameters") or "requestBody" in operation:
            assert "400" in responses, where
    text = json.dumps(DOCUMENT)
    assert "#/$defs/" not in text
    assert '"$defs"' not in text
    named = set(re.findall(r'"#/components/schemas/([^"]+)"', text))
    assert named <= set(DOCUMENT["components"]["schemas"])


def test_no_integer_parameter_can_overflow_sqlite() -> None:
    """``GET /v1/audit?before_id=9223372036854775808`` was a 500: every integer in a path
    or query is bounded to 64 bits."""
    for method, path, operation in _operations():
        for parameter in operation.get("parameters", []):
            for integer in _integers(parameter["schema"]):
                assert integer.get("maximum", 2**63) < 2**63, (method, path, parameter)
                assert integer.get("minimum", -(2**63) - 1) >= -(2**63), (method, path)


@quick.parametrize()
@settings(_settings(EXAMPLES["strangers"]))
def test_strangers_get_401_everywhere_but_health(
    case: schemathesis.Case, server: ParleyServer, keys: dict[str, str]
) -> None:
    for headers in ({}, auth("sk-parley-garbage"), {"x-api-key": "garbage"}):
        response = case.call(base_url=server.url, headers=headers, timeout=TIMEOUT)
        if case.operation.path in PUBLIC:
            assert response.status_code < 500, response.text
            continue
        assert response.status_code == 401, (headers, response.status_code, response.text)
        case.validate_response(response, checks=CONFORMANCE)


@quick.parametrize()
@settings(_settings(EXAMPLES["other_owner"]))
def test_another_owner_reads_and_changes_nothing_of_a(
    case: schemathesis.Case,
    server: ParleyServer,
    keys: dict[str, str],
    victim: Victim,
    before: dict[str, str],
) -> None:
    planted = plant(case, victim.values())
    response = case.call(base_url=server.url, headers=auth(keys["bob"]), timeout=TIMEOUT)
    case.validate_response(response, checks=CONFORMANCE)
    if planted:
        assert response.status_code >= 400, (planted, response.status_code, response.text)
    assert SECRET not in response.text, response.text


def test_a_reads_every_object_as_before(
    server: ParleyServer, keys: dict[str, str], victim: Victim, before: dict[str, str]
) -> None:
    """After another owner's fuzzing (the test above), A's objects are unchanged."""
    assert snapshot(server, keys["alice"], victim) == before


@full.parametrize()
@settings(_settings(EXAMPLES["owner"]))
def test_owner_answers_conform_to_the_schema(
    case: schemathesis.Case, server: ParleyServer, keys: dict[str, str], victim: Victim
) -> None:
    if case.method != "DELETE" and every_other(case):
        values = victim.values()
        if case.operation.path.endswith("/edit"):  # a new version of A's user message
            values["message_id"] = victim.user_message_id
        plant(case, values)  # A's own ids: the code behind them runs
    admin = case.operation.path.startswith(ADMIN_PATHS)
    key = keys["admin"] if admin else keys["alice"]
    case.call_and_validate(
        base_url=server.url, headers=auth(key), checks=CONFORMANCE, timeout=TIMEOUT
    )


DELETIONS = (
    "/v1/conversations/{conversation_id}/messages/{message_id}",
    "/v1/conversations/{conversation_id}/summary",
    "/v1/conversations/{conversation_id}",
    "/v1/knowledge_bases/{kb}/documents/{document_id}",
    "/v1/knowledge_bases/{kb}",
    "/v1/memories/{memory_id}",
    "/v1/assistants/{assistant_id}",
)
"""The deletions of objects that exist, which fuzzing leaves out (A's objects stay)."""


def test_deletions_conform_to_the_schema(server: ParleyServer) -> None:
    key = server.create_key("carol")
    values = make_victim(server, key).values()
    for path in DELETIONS:
        names = re.findall(r"\{(\w+)\}", path)
        case = quick[path]["DELETE"].Case(path_parameters={n: values[n] for n in names})
        response = case.call_and_validate(
            base_url=server.url, headers=auth(key), checks=CONFORMANCE, timeout=TIMEOUT
        )
        assert response.status_code == 200, (path, response.text)


LOOPBACK = "http://127.0.0.1:9/mcp"
MCP_STEPS: tuple[tuple[str, str, dict[str, str], Any, int], ...] = (
    ("POST", "/v1/mcp/servers", {}, {"name": "loop", "url": LOOPBACK}, 201),
    ("GET", "/v1/mcp/servers", {}, None, 200),
    ("GET", "/v1/mcp/servers/{name}", {"name": "loop"}, None, 200),
    ("PATCH", "/v1/mcp/servers/{name}", {"name": "loop"}, {"timeout": 5}, 200),
    ("GET", "/v1/mcp/servers/{name}/tools", {"name": "loop"}, None, 502),
    ("POST", "/v1/mcp/servers/import", {}, {"mcpServers": {"copy": {"url": LOOPBACK}}}, 200),
    ("DELETE", "/v1/mcp/servers/{name}", {"name": "loop"}, None, 200),
)
"""The admin's MCP operations, which fuzzing leaves to non-admins (a generated URL would
be resolved: no DNS from the tests), on servers that exist."""


def test_admin_mcp_answers_conform_to_the_schema(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    for method, path, parameters, body, status in MCP_STEPS:
        operation = quick[path][method]
        case = (
            operation.Case(path_parameters=parameters)
            if body is None
            else operation.Case(path_parameters=parameters, body=body)
        )
        # the 502 of a server that does not answer is the one expected here
        checks = CONFORMANCE if status < 500 else CONFORMANCE[1:]
        response = case.call_and_validate(
            base_url=server.url, headers=auth(keys["admin"]), checks=checks, timeout=TIMEOUT
        )
        assert response.status_code == status, (method, path, response.text)
        if method == "GET" and path.endswith("{name}"):
            assert response.json()["config"]["url"] == LOOPBACK  # the admin's view
