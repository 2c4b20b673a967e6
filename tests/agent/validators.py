"""Strict validators of the OpenAI and Anthropic message payloads' ordering rules.

They are stricter than the providers wherever a rule is uncertain, so that a payload
they accept is one the real APIs accept. Each raises ``WireError`` naming the message.
"""

from __future__ import annotations

import re
from typing import Any

TOOL_ID = re.compile(r"[A-Za-z0-9_-]+")
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_OPENAI_ID = 64


class WireError(AssertionError):
    pass


def _check(condition: object, message: str) -> None:
    if not condition:
        raise WireError(message)


def validate_openai(messages: list[dict[str, Any]]) -> None:
    """Chat Completions: tool messages only right after an assistant message with
    tool_calls, each call answered exactly once before any other message, safe ids."""
    seen: set[str] = set()
    open_calls: list[str] | None = None  # calls of the assistant whose tool block we are in
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role: Any = message.get("role")
        if role == "tool":
            call_id: Any = message.get("tool_call_id")
            _check(open_calls is not None, f"{where}: tool message not after tool_calls")
            assert open_calls is not None
            _check(call_id in open_calls, f"{where}: {call_id!r} answers no open call")
            open_calls.remove(call_id)
            _check(isinstance(message.get("content"), str), f"{where}: tool content not text")
            continue
        _check(not open_calls, f"{where}: calls {open_calls} unanswered before a {role}")
        open_calls = None
        content: Any = message.get("content")
        if role in ("system", "user"):
            _check(
                isinstance(content, str)
                or (isinstance(content, list) and all(_openai_part(p) for p in content)),
                f"{where}: bad {role} content",
            )
        elif role == "assistant":
            calls = message.get("tool_calls")
            if calls is None:
                _check(isinstance(content, str), f"{where}: assistant without content or calls")
                continue
            _check(isinstance(calls, list) and calls, f"{where}: empty tool_calls")
            _check(content is None or isinstance(content, str), f"{where}: bad content")
            open_calls = []
            for call in calls:
                call_id = call.get("id")
                _check(isinstance(call_id, str) and TOOL_ID.fullmatch(call_id), f"{where}: id")
                _check(len(call_id) <= MAX_OPENAI_ID, f"{where}: id {call_id!r} too long")
                _check(call_id not in seen, f"{where}: id {call_id!r} used twice")
                _check(call.get("type") == "function", f"{where}: call type")
                function = call.get("function") or {}
                _check(TOOL_NAME.fullmatch(function.get("name", "")), f"{where}: tool name")
                _check(isinstance(function.get("arguments"), str), f"{where}: arguments")
                seen.add(call_id)
                open_calls.append(call_id)
        else:
            raise WireError(f"{where}: unknown role {role!r}")
    _check(not open_calls, f"calls {open_calls} unanswered at the end")


def _openai_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in ("text", "image_url")


def validate_anthropic(system: str, messages: list[dict[str, Any]]) -> None:
    """Messages API: user first, strict alternation, every tool_use answered by a
    tool_result at the start of the very next user message, no empty content, safe ids."""
    _check(isinstance(system, str), "system is not text")
    _check(messages, "no messages")
    _check(messages[0].get("role") == "user", "the first message is not a user message")
    seen: set[str] = set()
    uses: list[str] = []  # tool_use ids of the previous assistant message
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role: Any = message.get("role")
        content: Any = message.get("content")
        _check(role in ("user", "assistant"), f"{where}: role {role!r}")
        if index:
            _check(role != messages[index - 1]["role"], f"{where}: roles do not alternate")
        _check(isinstance(content, list) and content, f"{where}: empty content")
        for block in content:
            _check_block(block, role, where)
        kinds = [b["type"] for b in content]
        if role == "user":
            results = [b["tool_use_id"] for b in content if b["type"] == "tool_result"]
            _check(
                kinds[: len(results)] == ["tool_result"] * len(results),
                f"{where}: tool_result blocks are not first",
            )
            _check(len(set(results)) == len(results), f"{where}: a tool_use answered twice")
            _check(set(results) == set(uses), f"{where}: results {results} for uses {uses}")
            uses = []
        else:
            uses = [b["id"] for b in content if b["type"] == "tool_use"]
            for use in uses:
                _check(use not in seen, f"{where}: tool_use id {use!r} used twice")
                seen.add(use)
    _check(not uses, f"tool_use {uses} unanswered at the end")


def _check_block(block: Any, role: str, where: str) -> None:
    _check(isinstance(block, dict), f"{where}: block is not an object")
    kind = block.get("type")
    if kind == "text":
        _check(isinstance(block.get("text"), str) and block["text"].strip(), f"{where}: text")
    elif kind == "image" and role == "user":
        _check(isinstance(block.get("source"), dict), f"{where}: image source")
    elif kind == "tool_result" and role == "user":
        _check(TOOL_ID.fullmatch(block.get("tool_use_id", "")), f"{where}: tool_use_id")
        result = block.get("content")
        _check(
            (isinstance(result, str) and result.strip()) or (isinstance(result, list) and result),
            f"{where}: empty tool_result content",
        )
        _check(isinstance(block.get("is_error", False), bool), f"{where}: is_error")
    elif kind == "tool_use" and role == "assistant":
        _check(TOOL_ID.fullmatch(block.get("id", "")), f"{where}: tool_use id")
        _check(TOOL_NAME.fullmatch(block.get("name", "")), f"{where}: tool_use name")
        _check(isinstance(block.get("input"), dict), f"{where}: tool_use input")
    elif kind == "thinking" and role == "assistant":
        _check(isinstance(block.get("signature"), str), f"{where}: thinking signature")
    else:
        raise WireError(f"{where}: a {kind!r} block in a {role} message")
