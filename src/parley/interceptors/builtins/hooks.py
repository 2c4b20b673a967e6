"""Command hooks (octos): site policy written as small programs, run as one interceptor.

Each entry of ``interceptors.hooks`` (``HookSettings``) names an event and a command. On
that event the command runs, is handed a JSON object on stdin, and answers with its exit
code (and stdout)::

    event              interceptor hook   exit 0   exit 1                   exit 2
    before_model_call  before_request     allow    deny: HookDenied (403)   logged, ignored
    after_model_call   after_response     -        logged, ignored          logged, ignored
    before_tool_call   before_tool_call   allow    deny: an error result    stdout's JSON
                                                   the model sees           object replaces
                                                                            the arguments
    after_tool_call    after_tool_call    -        logged, ignored          logged, ignored
    turn_end           on_turn_end        -        logged, ignored          logged, ignored

The payload has ``event``, ``hook``, ``owner``, ``key_id``, ``conversation_id``,
``message_id``, ``tokens`` (``input``/``output``: the turn's running totals) and
``cost_usd`` (the turn's running cost), plus by event: ``model``, ``purpose``, ``attempt``
(model calls); ``stop_reason``, ``text`` (after_model_call, turn_end); ``tool``,
``arguments``, ``call_id`` (tool calls); ``result`` (``content``, ``is_error``:
after_tool_call); ``error`` (``code``, ``message``: a failed turn). Never API keys.

How a command runs: as an argv list, without a shell, in the server's working directory
(a relative command path, ``./hooks/policy.py`` or ``python3 hooks/policy.py``, is
relative to it), in a new session, with a minimal environment (PATH, HOME, LANG and
LC_ALL when set, plus the hook's own ``env``; none of the server's secrets), for at most
``timeout_seconds``, after which its whole process group is killed. Leftover processes
are killed when it exits.

Any other exit code, a timeout, a command that cannot start or (exit 2) stdout that is
not a JSON object is a failure: it is logged with stderr's first lines and the call goes
on as if allowed. ``max_failures`` failures in a row disable the hook (logged at ERROR);
a run that works resets the count. ``tools`` limits the tool events to those tool names.
Several hooks on one event run in config order: the first deny wins and replaced
arguments are handed to the next hook.

What does not belong here: turning settings into interceptors (``builtins/__init__.py``,
``discovery.py``), the chain's failure policy (``chain.py``), process groups and killing
them (``processes.py``, shared with the workspace shell tool).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parley.errors import PermissionDenied
from parley.interceptors.protocol import (
    CallInfo,
    Interceptor,
    ModelResponse,
    ToolCall,
    TurnEnd,
    TurnInfo,
)
from parley.messages import Usage
from parley.processes import kill_group, wait_exited
from parley.providers.protocol import ModelRequest
from parley.settings.interceptors import HookEvent, HookSettings
from parley.tools.protocol import ToolOutput

log = logging.getLogger(__name__)

ALLOW, DENY, REPLACE = 0, 1, 2
"""The exit codes a hook may answer with; anything else is a failure."""
MAX_OUTPUT_BYTES = 64 * 1024
"""Of a hook's stdout and of its stderr, what is kept (the rest is read and dropped)."""
MAX_REASON_CHARS = 1000
STDERR_LINES = 5
"""How much of stderr a failure's log line shows."""
GRACE_SECONDS = 2.0
"""After the hook ends: how long its killed group and its pipes may take to close."""
ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL")
"""The server's variables a hook sees (when set); nothing else, so no keys."""
BEFORE_EVENTS = frozenset({"before_model_call", "before_tool_call"})


class HookDenied(PermissionDenied):
    """A ``before_model_call`` hook exited 1: the model call is refused."""

    code = "hook_denied"


@dataclass(slots=True)
class _Hook:
    settings: HookSettings
    name: str
    failures: int = 0
    """Failures in a row."""
    disabled: bool = False

    def wants(self, tool: str | None) -> bool:
        tools = self.settings.tools
        return not self.disabled and (tool is None or not tools or tool in tools)


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A hook's answer, once it ran without failing."""

    code: int
    """``ALLOW``, ``DENY`` or ``REPLACE``."""
    text: str
    """stdout, stripped."""
    arguments: dict[str, Any] | None = None
    """The replacement arguments (exit 2 on ``before_tool_call``)."""


@dataclass(frozen=True, slots=True)
class _Run:
    returncode: int | None
    stdout: str
    stderr: str
    problem: str | None = None
    """Why it did not run to an end (cannot start, timed out)."""


class CommandHooks(Interceptor):
    """The configured command hooks. Each method returns at once when no hook is set up
    for its event; hooks without a ``name`` are called ``<event>#<index in the list>``."""

    name = "command_hooks"

    def __init__(self, hooks: Sequence[HookSettings], order: int = 60) -> None:
        self.order = order
        self._hooks = [
            _Hook(hook, hook.name or f"{hook.event}#{index}") for index, hook in enumerate(hooks)
        ]
        self._by_event: dict[str, list[_Hook]] = {}
        for hook in self._hooks:
            self._by_event.setdefault(hook.settings.event, []).append(hook)

    def describe(self) -> dict[str, Any]:
        return {
            "hooks": [
                {
                    "name": hook.name,
                    "event": hook.settings.event,
                    "command": hook.settings.command[0],
                    "tools": list(hook.settings.tools),
                    "disabled": hook.disabled,
                    "failures": hook.failures,
                }
                for hook in self._hooks
            ]
        }

    # --- the interceptor hooks ------------------------------------------------------

    async def before_request(self, request: ModelRequest, call: CallInfo) -> ModelRequest | None:
        hooks = self._wanted("before_model_call")
        if not hooks:
            return None
        payload = _model_payload("before_model_call", call)
        for hook in hooks:
            verdict = await self._consult(hook, payload)
            if verdict is not None and verdict.code == DENY:
                raise HookDenied(f"[HOOK DENIED] The model call was blocked: {_reason(verdict)}")
        return None

    async def after_response(self, response: ModelResponse, call: CallInfo) -> ModelResponse | None:
        hooks = self._wanted("after_model_call")
        if not hooks:
            return None
        payload = _model_payload("after_model_call", call)
        payload.update(stop_reason=response.stop_reason, text=response.text)
        for hook in hooks:
            await self._consult(hook, payload)
        return None

    async def before_tool_call(
        self, tool_call: ToolCall, call: CallInfo
    ) -> ToolCall | ToolOutput | None:
        hooks = self._wanted("before_tool_call", tool_call.name)
        if not hooks:
            return None
        payload = _tool_payload("before_tool_call", tool_call, call)
        changed: ToolCall | None = None
        for hook in hooks:
            verdict = await self._consult(hook, payload)
            if verdict is None or verdict.code == ALLOW:
                continue
            if verdict.code == DENY:
                return ToolOutput(
                    f"[HOOK DENIED] Tool '{tool_call.name}' was blocked: "
                    f"{_reason(verdict).rstrip('.')}. Do not retry.",
                    is_error=True,
                )
            if verdict.arguments is not None:
                changed = ToolCall(tool_call.id, tool_call.name, verdict.arguments)
                payload["arguments"] = verdict.arguments
        return changed

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> ToolOutput | None:
        hooks = self._wanted("after_tool_call", tool_call.name)
        if not hooks:
            return None
        payload = _tool_payload("after_tool_call", tool_call, call)
        payload["result"] = {"content": output.content, "is_error": output.is_error}
        for hook in hooks:
            await self._consult(hook, payload)
        return None

    async def on_turn_end(self, end: TurnEnd) -> None:
        hooks = self._wanted("turn_end")
        if not hooks:
            return
        payload = _base_payload("turn_end", end.turn, end.usage, end.cost_usd)
        payload.update(stop_reason=end.stop_reason, text=end.text)
        if end.error is not None:
            payload["error"] = {"code": end.error.code, "message": end.error.message}
        for hook in hooks:
            await self._consult(hook, payload)

    # --- running one hook -----------------------------------------------------------

    def _wanted(self, event: HookEvent, tool: str | None = None) -> list[_Hook]:
        hooks = self._by_event.get(event)
        return [hook for hook in hooks if hook.wants(tool)] if hooks else []

    async def _consult(self, hook: _Hook, payload: dict[str, Any]) -> _Verdict | None:
        """Run ``hook``; its verdict, or None after a failure (logged and counted)."""
        event = hook.settings.event
        payload["hook"] = hook.name
        run = await run_command(hook.settings, _encode(payload))
        if run.problem is not None:
            self._failed(hook, run.problem, run.stderr)
            return None
        code = run.returncode
        if code not in (ALLOW, DENY, REPLACE):
            self._failed(hook, f"exit code {code}", run.stderr)
            return None
        assert code is not None
        text = run.stdout.strip()
        arguments: dict[str, Any] | None = None
        if code == REPLACE and event == "before_tool_call":
            arguments = _json_object(text)
            if arguments is None:
                self._failed(hook, "exit code 2 but stdout is not a JSON object", run.stderr)
                return None
        elif code == DENY and event in BEFORE_EVENTS:
            log.info("command hook %r denied %s: %s", hook.name, event, text[:200])
        elif code != ALLOW:
            log.warning(
                "command hook %r exited %d on %s: ignored (it means nothing there): %s",
                hook.name,
                code,
                event,
                text[:200],
            )
        hook.failures = 0
        return _Verdict(code, text, arguments)

    def _failed(self, hook: _Hook, problem: str, stderr: str) -> None:
        hook.failures += 1
        limit = hook.settings.max_failures
        lines = stderr.strip().splitlines()[:STDERR_LINES]
        log.warning(
            "command hook %r failed on %s (%d of %d in a row; the call goes on): %s%s",
            hook.name,
            hook.settings.event,
            hook.failures,
            limit,
            problem,
            "".join(f"\n  stderr: {line[:300]}" for line in lines),
        )
        if hook.failures >= limit and not hook.disabled:
            hook.disabled = True
            log.error(
                "command hook %r (%s) disabled after %d failures in a row",
                hook.name,
                hook.settings.command[0],
                hook.failures,
            )


async def run_command(hook: HookSettings, payload: bytes) -> _Run:
    """Run the hook's command with ``payload`` on stdin; its process group is dead after."""
    try:
        process = await asyncio.create_subprocess_exec(
            *hook.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=hook_environment(hook.env),
        )
    except (OSError, ValueError) as exc:
        return _Run(None, "", "", f"cannot start {hook.command[0]!r}: {exc}")
    feed, out, err = process.stdin, process.stdout, process.stderr
    assert feed is not None
    assert out is not None
    assert err is not None
    readers = (asyncio.create_task(_drain(out)), asyncio.create_task(_drain(err)))
    problem: str | None = None
    try:
        async with asyncio.timeout(hook.timeout_seconds):
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                feed.write(payload)
                await feed.drain()
            feed.close()
            await wait_exited(process, math.inf)
    except TimeoutError:
        problem = f"timed out after {hook.timeout_seconds:g} s (its process group was killed)"
    finally:
        kill_group(process.pid)  # on timeout, cancellation, and leftovers after an exit
        feed.close()
        await wait_exited(process, GRACE_SECONDS)
        _, pending = await asyncio.wait(readers, timeout=GRACE_SECONDS)
        for reader in pending:
            reader.cancel()  # a process that left the group still holds the pipe
        await asyncio.gather(*pending, return_exceptions=True)
    code = process.returncode
    if problem is None and code is not None and code < 0:
        problem = f"killed by signal {-code}"
    return _Run(code, _text(readers[0]), _text(readers[1]), problem)


def hook_environment(extra: dict[str, str]) -> dict[str, str]:
    """A minimal environment: a few of the server's variables, then the hook's own."""
    env = {key: os.environ[key] for key in ENVIRONMENT if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(extra)
    return env


async def _drain(stream: asyncio.StreamReader) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(1 << 16):
        if len(kept) < MAX_OUTPUT_BYTES:
            kept += chunk[: MAX_OUTPUT_BYTES - len(kept)]
    return bytes(kept)


def _text(reader: asyncio.Task[bytes]) -> str:
    if reader.cancelled() or reader.exception() is not None:
        return ""
    return reader.result().decode("utf-8", errors="replace")


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reason(verdict: _Verdict) -> str:
    return verdict.text[:MAX_REASON_CHARS] or "no reason given"


# --- payloads -----------------------------------------------------------------------


def _base_payload(event: str, turn: TurnInfo, usage: Usage, cost_usd: float) -> dict[str, Any]:
    return {
        "event": event,
        "hook": None,
        "owner": turn.caller.owner,
        "key_id": turn.caller.key_id,
        "conversation_id": turn.conversation_id,
        "message_id": turn.message_id,
        "tokens": {"input": usage.input_tokens, "output": usage.output_tokens},
        "cost_usd": cost_usd,
    }


def _model_payload(event: str, call: CallInfo) -> dict[str, Any]:
    payload = _base_payload(event, call.turn, *call.turn.totals())
    payload.update(model=call.name, purpose=call.purpose, attempt=call.attempt)
    return payload


def _tool_payload(event: str, tool_call: ToolCall, call: CallInfo) -> dict[str, Any]:
    payload = _base_payload(event, call.turn, *call.turn.totals())
    payload.update(tool=tool_call.name, arguments=tool_call.arguments, call_id=tool_call.id)
    return payload


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8")
