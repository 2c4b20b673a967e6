"""Everything in examples/ runs as written, against a real server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from parley.testing.mock_openai import MockOpenAI
from tests.support.server import ParleyServer

EXAMPLES = Path(__file__).parents[1] / "examples"


def run_example(
    server: ParleyServer, name: str, model: str = "fast", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``examples/name`` run with Python against ``server`` (PARLEY_URL, PARLEY_MODEL)."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env={**server.env, "PARLEY_URL": f"{server.url}/v1", "PARLEY_MODEL": model},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def test_chat_py(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("Blue.")
    upstream.queue_text("Green", ".")
    result = run_example(parley, "chat.py")
    assert "reply: Blue." in result.stdout
    assert "stream: Green." in result.stdout
    assert "usage: " in result.stdout
    assert upstream.requests[1]["messages"][-1]["content"] == "And another one?"
    assert len(upstream.requests[1]["messages"]) == 3


def test_other_doors_py(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("Blue.")
    upstream.queue_text("Green.")
    upstream.queue_text("Apple.")
    result = run_example(parley, "other_doors.py")
    assert "response: Blue." in result.stdout
    assert "continued: Green." in result.stdout
    assert "messages: Apple." in result.stdout
    assert "embedding: 384 dimensions" in result.stdout  # the default embedder
    history = [m["content"] for m in upstream.requests[1]["messages"]]
    assert history == ["Name a colour.", "Blue.", "And another one?"]


def test_curl_sh(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("Hello", "!")
    result = subprocess.run(
        ["bash", str(EXAMPLES / "curl.sh")],
        env={**parley.env, "PARLEY": parley.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert "data: [DONE]" in lines
    listing = json.loads(lines[-1])
    assert listing["object"] == "list"
    assert listing["data"][0]["title"] == "Say hello"


def test_example_config_serves(tmp_path: Path) -> None:
    server = ParleyServer(tmp_path, {})
    server.config_path.write_text((EXAMPLES / "parley.yaml").read_text())
    with server:
        result = server.cli("keys", "list")
        assert result.returncode == 0, result.stderr


def test_version_and_help() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "parley", "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("parley ")
    helptext = subprocess.run(
        [sys.executable, "-m", "parley", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--port" in helptext.stdout


def test_agent_py(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_tool_calls([("call_1", "current_time", "{}")])
    upstream.queue_text("It is ", "noon.")
    upstream.queue_tool_calls([("call_2", "current_time", "{}")])
    upstream.queue_text("UTC.")
    result = run_example(parley, "agent.py")
    assert "[calling current_time({})]" in result.stdout
    assert "[current_time -> {" in result.stdout
    assert "It is noon." in result.stdout
    assert "cost: $" in result.stdout
    assert "task: completed - UTC." in result.stdout


def test_interceptors_yaml(tmp_path: Path, upstream: MockOpenAI) -> None:
    """examples/interceptors.yaml as written: logging, the word list and the hook script."""
    server = ParleyServer(
        tmp_path,
        {},
        env={"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-upstream"},
    )
    server.config_path.write_text((EXAMPLES / "interceptors.yaml").read_text())
    upstream.queue_tool_calls([("call_1", "web_fetch", '{"url": "https://ads.example.net/x"}')])
    upstream.queue_text("The password is hun", "ter2, do not share.")
    with server:
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={
                "model": "openai/mock-model",
                "messages": [{"role": "user", "content": "my password is hunter2"}],
            },
            timeout=60,
        ).json()
        log = server.log()
    assert reply["choices"][0]["message"]["content"] == "The password is ***, do not share."
    first, second = upstream.requests  # two steps; no title or suggestions: stateless
    assert first["messages"][-1]["content"] == "my password is ***"
    denied = second["messages"][-1]
    assert denied["role"] == "tool"
    assert denied["content"].startswith("[HOOK DENIED] Tool 'web_fetch' was blocked: pages on")
    assert "model call chat -> openai/mock-model" in log


def test_approvals_example(tmp_path: Path, upstream: MockOpenAI) -> None:
    """examples/approvals.yaml and examples/approvals.py as written."""
    server = ParleyServer(
        tmp_path,
        {},
        env={"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-upstream"},
    )
    server.config_path.write_text(
        (EXAMPLES / "approvals.yaml").read_text()
        + "chat: {generate_titles: false, generate_suggestions: false}\n"
    )
    arguments = json.dumps({"path": "rain.txt", "content": "soft rain on the roof"})
    upstream.queue_tool_calls([("call_1", "workspace_write", arguments)])
    upstream.queue_text("Saved the haiku.")
    with server:
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "approvals.py")],
            env={**server.env, "PARLEY_URL": f"{server.url}/v1", "PARLEY_MODEL": "openai/m"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    assert f"waiting: workspace_write {arguments}" in result.stdout
    assert "ran: workspace_write -> " in result.stdout
    assert "reply: Saved the haiku." in result.stdout
    assert len(upstream.requests) == 2


def test_resume_py(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("one", " two", " three", " four", " five")
    result = run_example(parley, "resume.py")
    assert "connection dropped after event msg_" in result.stdout
    assert "reply: one two three four five" in result.stdout


def test_the_deploy_folder_is_consistent() -> None:
    """deploy/ cannot be brought up here (no Docker): its settings are valid, and the
    Compose file, nginx and the settings name the same three instances and services."""
    import re

    import yaml

    from parley.settings import Settings

    deploy = EXAMPLES.parent / "deploy"
    settings = Settings.model_validate(yaml.safe_load((deploy / "parley.yaml").read_text()))
    assert settings.database_url.startswith("postgresql+asyncpg://parley:parley@postgres/")
    assert settings.redis.url == "redis://redis:6379/0"
    compose = yaml.safe_load((deploy / "compose.yaml").read_text())
    instances = sorted(name for name in compose["services"] if name.startswith("parley"))
    assert instances == ["parley1", "parley2", "parley3"]
    upstreams = re.findall(r"server (parley\d):8000", (deploy / "nginx.conf").read_text())
    assert sorted(upstreams) == instances
    assert {"postgres", "redis", "nginx"} <= set(compose["services"])
    assert "/ready" in str(compose["services"]["parley1"]["healthcheck"]["test"])
