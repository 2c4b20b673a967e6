"""Command hooks (octos): real hook scripts run by ``CommandHooks``, on their own, through
the interceptor chain, and through a real Parley server with the official client."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from parley.errors import ParleyError
from parley.identity import Caller
from parley.interceptors.builtins.hooks import CommandHooks, HookDenied
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallInfo, ModelResponse, ToolCall, TurnEnd, TurnInfo
from parley.messages import Usage
from parley.providers.protocol import ModelRequest
from parley.settings.interceptors import HookSettings
from parley.testing.mock_openai import MockOpenAI
from parley.tools.function import function_tool
from parley.tools.protocol import ToolOutput
from tests.conftest import server_config
from tests.support.server import ParleyServer
from tests.tools.contexts import tool_context

pytestmark = pytest.mark.anyio

POLICY = Path(__file__).parents[2] / "examples" / "hooks" / "policy.py"
LOGGER = "parley.interceptors.builtins.hooks"

TURN = TurnInfo(
    caller=Caller("alice", "key_42"),
    conversation_id="conv_7",
    message_id="msg_9",
    totals=lambda: (Usage(input_tokens=120, output_tokens=30), 0.0042),
)


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """A hook command: ``body`` as a Python script run by this interpreter."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def recorder(tmp_path: Path, name: str, code: int = 0, stdout: str = "") -> list[str]:
    """A hook that appends its payload (one JSON line) to ``<name>.jsonl``, prints
    ``stdout`` and exits ``code``."""
    log = tmp_path / f"{name}.jsonl"
    return script(
        tmp_path,
        name,
        f"""
        import sys
        data = sys.stdin.read()
        with open({str(log)!r}, "a") as f:
            f.write(data + "\\n")
        sys.stdout.write({stdout!r})
        sys.exit({code})
        """,
    )


def payloads(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    log = tmp_path / f"{name}.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def hook(event: str, command: list[str], **options: Any) -> HookSettings:
    return HookSettings.model_validate({"event": event, "command": command, **options})


def tool_call(name: str = "get_weather", **arguments: Any) -> tuple[ToolCall, CallInfo]:
    arguments = arguments or {"city": "Oslo"}
    info = CallInfo("tool", name, TURN, purpose="tool", call_id="call_1")
    return ToolCall("call_1", name, arguments), info


def model_call() -> tuple[ModelRequest, CallInfo]:
    info = CallInfo("model", "fast", TURN, purpose="chat", attempt=1, upstream_model="m")
    return ModelRequest("m", ()), info


def response(text: str = "Hello.") -> ModelResponse:
    return ModelResponse(text, "", (), "end_turn", Usage(10, 2), 0.001, 0.5, 0.1)


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaps counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return fields[0] in ("Z", "X")


# --- allow, deny, modify ------------------------------------------------------------


async def test_exit_0_allows_and_the_payload_describes_the_tool_call(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("before_tool_call", recorder(tmp_path, "allow"), name="audit")])
    call, info = tool_call(city="Oslo", days=3)
    assert await hooks.before_tool_call(call, info) is None
    [payload] = payloads(tmp_path, "allow")
    assert payload == {
        "event": "before_tool_call",
        "hook": "audit",
        "owner": "alice",
        "key_id": "key_42",
        "conversation_id": "conv_7",
        "message_id": "msg_9",
        "tokens": {"input": 120, "output": 30},
        "cost_usd": 0.0042,
        "tool": "get_weather",
        "arguments": {"city": "Oslo", "days": 3},
        "call_id": "call_1",
    }


async def test_exit_1_denies_a_tool_with_stdout_as_the_reason(tmp_path: Path) -> None:
    deny = recorder(tmp_path, "deny", code=1, stdout="Oslo is off limits.\n")
    hooks = CommandHooks([hook("before_tool_call", deny)])
    call, info = tool_call()
    output = await hooks.before_tool_call(call, info)
    assert output == ToolOutput(
        "[HOOK DENIED] Tool 'get_weather' was blocked: Oslo is off limits. Do not retry.",
        is_error=True,
    )


async def test_exit_1_without_stdout_gives_no_reason(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("before_tool_call", recorder(tmp_path, "deny", code=1))])
    output = await hooks.before_tool_call(*tool_call())
    assert isinstance(output, ToolOutput)
    assert output.content.endswith("was blocked: no reason given. Do not retry.")


async def test_exit_1_denies_a_model_call(tmp_path: Path) -> None:
    deny = recorder(tmp_path, "deny", code=1, stdout="budget spent")
    hooks = CommandHooks([hook("before_model_call", deny)])
    request, info = model_call()
    with pytest.raises(HookDenied) as caught:
        await hooks.before_request(request, info)
    error = caught.value
    assert isinstance(error, ParleyError)
    assert (error.status, error.type, error.code) == (403, "permission_error", "hook_denied")
    assert error.message == "[HOOK DENIED] The model call was blocked: budget spent"
    [payload] = payloads(tmp_path, "deny")
    assert (payload["event"], payload["model"], payload["purpose"], payload["attempt"]) == (
        "before_model_call",
        "fast",
        "chat",
        1,
    )
    assert "tool" not in payload


async def test_exit_0_allows_a_model_call(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("before_model_call", recorder(tmp_path, "allow"))])
    assert await hooks.before_request(*model_call()) is None
    assert len(payloads(tmp_path, "allow")) == 1


async def test_exit_2_replaces_the_arguments(tmp_path: Path) -> None:
    modify = script(
        tmp_path,
        "modify",
        """
        import json, sys
        payload = json.load(sys.stdin)
        arguments = payload["arguments"]
        arguments["city"] = arguments["city"].upper()
        print(json.dumps(arguments))
        sys.exit(2)
        """,
    )
    hooks = CommandHooks([hook("before_tool_call", modify)])
    call, info = tool_call(city="oslo", days=2)
    assert await hooks.before_tool_call(call, info) == ToolCall(
        "call_1", "get_weather", {"city": "OSLO", "days": 2}
    )


async def test_exit_2_with_invalid_json_is_a_failure_and_the_call_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = recorder(tmp_path, "bad", code=2, stdout="[1, 2]")
    hooks = CommandHooks([hook("before_tool_call", bad, name="bad")])
    with caplog.at_level(logging.WARNING, LOGGER):
        assert await hooks.before_tool_call(*tool_call()) is None
    assert hooks.describe()["hooks"][0]["failures"] == 1
    assert "not a JSON object" in caplog.text


async def test_hooks_chain_replacements_and_the_first_deny_wins(tmp_path: Path) -> None:
    modify = script(
        tmp_path,
        "modify",
        """
        import json, sys
        arguments = json.load(sys.stdin)["arguments"]
        print(json.dumps({**arguments, "units": "metric"}))
        sys.exit(2)
        """,
    )
    hooks = CommandHooks(
        [
            hook("before_tool_call", modify),
            hook("before_tool_call", recorder(tmp_path, "second")),
            hook("before_tool_call", recorder(tmp_path, "deny", code=1, stdout="no")),
            hook("before_tool_call", recorder(tmp_path, "never")),
        ]
    )
    output = await hooks.before_tool_call(*tool_call(city="Oslo"))
    assert isinstance(output, ToolOutput)
    assert output.is_error
    assert "blocked: no. Do not retry." in output.content
    [second] = payloads(tmp_path, "second")
    assert second["arguments"] == {"city": "Oslo", "units": "metric"}
    assert second["hook"] == "before_tool_call#1"
    assert payloads(tmp_path, "deny")[0]["arguments"] == {"city": "Oslo", "units": "metric"}
    assert payloads(tmp_path, "never") == []


async def test_tool_name_filters(tmp_path: Path) -> None:
    hooks = CommandHooks(
        [hook("before_tool_call", recorder(tmp_path, "deny", code=1), tools=["get_weather"])]
    )
    assert await hooks.before_tool_call(*tool_call("current_time")) is None
    assert payloads(tmp_path, "deny") == []
    assert isinstance(await hooks.before_tool_call(*tool_call("get_weather")), ToolOutput)
    assert len(payloads(tmp_path, "deny")) == 1


async def test_events_without_hooks_run_nothing(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("turn_end", recorder(tmp_path, "end", code=1))])
    call, info = tool_call()
    assert await hooks.before_tool_call(call, info) is None
    assert await hooks.after_tool_call(call, ToolOutput("ok"), info) is None
    assert await hooks.before_request(*model_call()) is None
    assert await hooks.after_response(response(), model_call()[1]) is None
    assert payloads(tmp_path, "end") == []


# --- after events and turn end ----------------------------------------------------------


async def test_after_tool_call_sees_the_result_and_its_exit_1_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    after = recorder(tmp_path, "after", code=1, stdout="too late")
    hooks = CommandHooks([hook("after_tool_call", after)])
    call, info = tool_call()
    with caplog.at_level(logging.WARNING, LOGGER):
        assert await hooks.after_tool_call(call, ToolOutput("12 C", is_error=False), info) is None
    [payload] = payloads(tmp_path, "after")
    assert payload["event"] == "after_tool_call"
    assert payload["result"] == {"content": "12 C", "is_error": False}
    assert payload["arguments"] == {"city": "Oslo"}
    assert hooks.describe()["hooks"][0]["failures"] == 0
    assert "ignored" in caplog.text


async def test_after_model_call_payload(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("after_model_call", recorder(tmp_path, "after"))])
    assert await hooks.after_response(response("Hi there."), model_call()[1]) is None
    [payload] = payloads(tmp_path, "after")
    assert payload["event"] == "after_model_call"
    assert (payload["text"], payload["stop_reason"], payload["model"]) == (
        "Hi there.",
        "end_turn",
        "fast",
    )
    assert payload["tokens"] == {"input": 120, "output": 30}


async def test_turn_end_payload(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("turn_end", recorder(tmp_path, "end"))])
    await hooks.on_turn_end(
        TurnEnd(
            TURN,
            text="partial",
            stop_reason=None,
            usage=Usage(input_tokens=500, output_tokens=60),
            cost_usd=0.25,
            tool_calls=2,
            error=ParleyError("upstream broke", code="upstream_error"),
        )
    )
    [payload] = payloads(tmp_path, "end")
    assert payload["event"] == "turn_end"
    assert payload["text"] == "partial"
    assert payload["stop_reason"] is None
    assert payload["tokens"] == {"input": 500, "output": 60}
    assert payload["cost_usd"] == 0.25
    assert payload["error"] == {"code": "upstream_error", "message": "upstream broke"}
    assert (payload["owner"], payload["conversation_id"]) == ("alice", "conv_7")


# --- failures -----------------------------------------------------------------------


async def test_a_timeout_kills_the_process_group_and_counts_a_failure(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    slow = script(
        tmp_path,
        "slow",
        f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open({str(pids)!r}, "w") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
        """,
    )
    hooks = CommandHooks([hook("before_tool_call", slow, timeout_seconds=0.5)])
    started = time.monotonic()
    assert await hooks.before_tool_call(*tool_call()) is None
    assert time.monotonic() - started < 4
    assert hooks.describe()["hooks"][0]["failures"] == 1
    hook_pid, child_pid = map(int, pids.read_text().split())
    for _ in range(150):  # the kernel may take a moment to tear the group down
        if gone(hook_pid) and gone(child_pid):
            break
        await asyncio.sleep(0.02)
    assert gone(hook_pid)
    assert gone(child_pid)  # the grandchild that held stdout died with the group


async def test_failures_in_a_row_disable_the_hook(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = script(
        tmp_path,
        "broken",
        f"""
        import sys
        open({str(tmp_path / "runs")!r}, "a").write("run\\n")
        print("kaboom", file=sys.stderr)
        sys.exit(3)
        """,
    )
    hooks = CommandHooks([hook("before_tool_call", broken, name="broken")])
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(5):
            assert await hooks.before_tool_call(*tool_call()) is None
    assert (tmp_path / "runs").read_text().count("run") == 3
    assert hooks.describe() == {
        "hooks": [
            {
                "name": "broken",
                "event": "before_tool_call",
                "command": sys.executable,
                "tools": [],
                "disabled": True,
                "failures": 3,
            }
        ]
    }
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "disabled" in errors[0].getMessage()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "exit code 3" in warnings[0]
    assert "stderr: kaboom" in warnings[0]


async def test_a_success_resets_the_failure_count(tmp_path: Path) -> None:
    mode = tmp_path / "mode"
    flaky = script(
        tmp_path,
        "flaky",
        f"""
        import sys
        sys.exit(int(open({str(mode)!r}).read()))
        """,
    )
    hooks = CommandHooks([hook("before_tool_call", flaky, max_failures=3)])

    async def run(code: int) -> None:
        mode.write_text(str(code))
        await hooks.before_tool_call(*tool_call())

    for code in (7, 7, 0, 7, 7):
        await run(code)
    state = hooks.describe()["hooks"][0]
    assert (state["failures"], state["disabled"]) == (2, False)
    await run(7)
    state = hooks.describe()["hooks"][0]
    assert (state["failures"], state["disabled"]) == (3, True)


async def test_a_command_that_cannot_start_is_a_failure(tmp_path: Path) -> None:
    hooks = CommandHooks([hook("before_model_call", [str(tmp_path / "missing-hook")])])
    assert await hooks.before_request(*model_call()) is None
    assert hooks.describe()["hooks"][0]["failures"] == 1


async def test_the_hook_environment_holds_no_server_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret")
    monkeypatch.setenv("PARLEY_PROVIDERS__0__API_KEY", "sk-another-secret")
    dump = tmp_path / "env.json"
    env_hook = script(
        tmp_path,
        "env",
        f"""
        import json, os
        json.dump(dict(os.environ), open({str(dump)!r}, "w"))
        """,
    )
    hooks = CommandHooks([hook("before_tool_call", env_hook, env={"HOOK_MODE": "strict"})])
    assert await hooks.before_tool_call(*tool_call()) is None
    seen = json.loads(dump.read_text())
    assert "sk-server-secret" not in json.dumps(seen)
    assert "sk-another-secret" not in json.dumps(seen)
    assert seen["HOOK_MODE"] == "strict"
    assert seen["PATH"] == os.environ["PATH"]
    # LC_CTYPE: Python's own C-locale coercion (PEP 538) may set it in the child
    assert set(seen) <= {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "HOOK_MODE"}


# --- through the chain --------------------------------------------------------------


@function_tool
def get_weather(city: str, units: str = "metric") -> str:
    """The weather in a city.

    Args:
        city: The city.
        units: metric or imperial.
    """
    return f"weather for {city} in {units}"


async def test_through_the_chain_arguments_are_replaced_and_denials_stop_the_tool(
    tmp_path: Path,
) -> None:
    imperial = script(
        tmp_path,
        "imperial",
        """
        import json, sys
        payload = json.load(sys.stdin)
        if payload["arguments"]["city"] == "Atlantis":
            print("Atlantis is fictional")
            sys.exit(1)
        print(json.dumps({**payload["arguments"], "units": "imperial"}))
        sys.exit(2)
        """,
    )
    after = recorder(tmp_path, "after")
    chain = InterceptorChain(
        [
            CommandHooks(
                [hook("before_tool_call", imperial), hook("after_tool_call", after)],
                order=60,
            )
        ]
    )
    context = tool_context(tmp_path)
    info = CallInfo("tool", "get_weather", TURN, purpose="tool", call_id="call_1")
    output = await chain.call_tool(get_weather, {"city": "Oslo"}, context, info)
    assert output == ToolOutput("weather for Oslo in imperial")
    [seen] = payloads(tmp_path, "after")
    assert seen["arguments"] == {"city": "Oslo", "units": "imperial"}
    assert seen["result"] == {"content": "weather for Oslo in imperial", "is_error": False}

    info = CallInfo("tool", "get_weather", TURN, purpose="tool", call_id="call_2")
    output = await chain.call_tool(get_weather, {"city": "Atlantis"}, context, info)
    assert output.is_error
    assert output.content == (
        "[HOOK DENIED] Tool 'get_weather' was blocked: Atlantis is fictional. Do not retry."
    )
    chain_hooks = chain.describe()[0]
    assert chain_hooks["name"] == "command_hooks"
    assert [h["event"] for h in chain_hooks["details"]["hooks"]] == [
        "before_tool_call",
        "after_tool_call",
    ]


# --- the example hook ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"url": "https://example.com/"}, None),
        ({"url": "https://example.com/", "max_chars": 500}, None),
        (
            {"url": "https://example.com/", "max_chars": 500_000},
            ToolCall("call_1", "web_fetch", {"url": "https://example.com/", "max_chars": 10_000}),
        ),
        (
            {"url": "https://cdn.ads.example.net/x.js", "max_chars": 500_000},
            ToolOutput(
                "[HOOK DENIED] Tool 'web_fetch' was blocked: pages on ads.example.net may "
                "not be fetched from this server. Do not retry.",
                is_error=True,
            ),
        ),
        (
            {"url": "http://TRACKER.example.com./pixel"},
            ToolOutput(
                "[HOOK DENIED] Tool 'web_fetch' was blocked: pages on tracker.example.com may "
                "not be fetched from this server. Do not retry.",
                is_error=True,
            ),
        ),
        ({"url": "https://notads.example.net/"}, None),
    ],
)
async def test_example_policy_hook(
    arguments: dict[str, Any], expected: ToolCall | ToolOutput | None
) -> None:
    assert os.access(POLICY, os.X_OK)
    assert POLICY.read_text().startswith("#!/usr/bin/env python3\n")
    hooks = CommandHooks([hook("before_tool_call", [sys.executable, str(POLICY)])])
    info = CallInfo("tool", "web_fetch", TURN, purpose="tool", call_id="call_1")
    assert await hooks.before_tool_call(ToolCall("call_1", "web_fetch", arguments), info) == (
        expected
    )
    assert hooks.describe()["hooks"][0]["failures"] == 0


async def test_example_policy_hook_ignores_other_tools_and_events() -> None:
    hooks = CommandHooks(
        [
            hook("before_tool_call", [sys.executable, str(POLICY)]),
            hook("after_tool_call", [sys.executable, str(POLICY)]),
        ]
    )
    info = CallInfo("tool", "current_time", TURN, purpose="tool", call_id="call_1")
    call = ToolCall("call_1", "current_time", {"url": "https://ads.example.net/"})
    assert await hooks.before_tool_call(call, info) is None
    assert await hooks.after_tool_call(call, ToolOutput("now"), info) is None
    assert [h["failures"] for h in hooks.describe()["hooks"]] == [0, 0]


# --- end to end ---------------------------------------------------------------------


@pytest.fixture
def hooked_server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    folder = tmp_path_factory.mktemp("hooks")
    deny = script(
        folder,
        "deny_time",
        """
        import json, sys
        payload = json.load(sys.stdin)
        print(f"{payload['tool']} is not allowed for {payload['owner']}")
        sys.exit(1)
        """,
    )
    config = server_config(
        upstream,
        interceptors={
            "hooks": [{"event": "before_tool_call", "command": deny, "tools": ["current_time"]}]
        },
    )
    with ParleyServer(folder / "data", config) as server:
        yield server


def test_end_to_end_a_denied_server_tool(hooked_server: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_tool_calls([("call_t1", "current_time", "{}")])
    upstream.queue_text("I may not check the time.")
    with openai.OpenAI(base_url=f"{hooked_server.url}/v1", api_key="sk-x", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "What time is it?"}],
            tools=["current_time"],  # type: ignore[list-item]
        )
    assert reply.choices[0].message.content == "I may not check the time."
    report = (reply.model_extra or {})["parley"]["tools"]
    assert [(t["name"], t["is_error"]) for t in report] == [("current_time", True)]
    second = upstream.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    result = second[2]["content"]
    assert result.startswith("[HOOK DENIED] Tool 'current_time' was blocked: ")
    assert "current_time is not allowed for local" in result
    assert result.endswith("Do not retry.")
