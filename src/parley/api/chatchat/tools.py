"""GET /tools and POST /tools/call: Parley's server tools in Langchain-Chatchat's shape.

Chatchat 0.3.x (``chatchat/server/api_server/tool_routes.py``; its client's
``ApiRequest.list_tools`` and ``call_tool``; its WebUI's tool panel in
``webui_pages/dialogue/dialogue.py``). Answers are ``{code, msg, data}`` with HTTP 200.

- ``GET /tools``: ``data`` is ``{name: {name, title, description, args, config}}`` for
  every tool the caller may call here. ``args`` is the JSON schema ``properties`` of the
  tool's parameters, each with a ``title`` and a ``type`` (the WebUI builds its inputs
  from ``title``, ``type``, ``default`` and ``choices``/``enum``); the
  ``database`` of ``search_local_knowledgebase`` has the caller's knowledge base names
  as ``choices``. ``title`` is Chatchat's (Chinese) title for Chatchat's tools, a
  readable one for Parley's. ``config`` is what Chatchat's ``tool_settings`` holds for
  the tool (``{}`` for Parley's own).
- ``POST /tools/call`` JSON ``{name, tool_input}``: ``data`` is the tool's output, as
  JSON when it is JSON (``search_local_knowledgebase``: Chatchat's ``{knowledge_base,
  docs}`` with each passage's text as it is). An unknown tool is ``code`` 500 ``no tool
  named 'x'``, a failed call ``code`` 500 ``failed to call tool 'x': <why>``.

Which tools: the server's built-in tools (``AppState.tools``) but those the operator
denies (``tools.approval``: ``deny``), those that exist only inside a chat turn (the
knowledge and memory tools of a turn's reach, ``get_session_capabilities``,
``activate_tools``: ``TURN_ONLY``) and ``search_local_knowledgebase`` while knowledge
bases are off (it is not registered then). The shell is there only when the server
enables it. A tool whose policy is ``ask`` may be called here: a person calling it
directly is the approval. MCP tools are not listed (their servers connect on demand).

A call runs as in a turn (``call_tool``): through the interceptor chain, under
``tools.timeout_seconds``, with a context for the caller (its conversations, the
knowledge service, no conversation, no session) and a scratch workspace removed when
the call ends; ``text``, what a model would see, is capped at
``tools.max_output_chars``.

Deviations: Chatchat's ``title`` of an argument is its name in title case, as here;
its ``args`` may lack a ``type`` (``anyOf``), Parley's always have one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from parley.api.chatchat.common import reply
from parley.api.chatchat.kb_tool import DataOutput, base_names
from parley.api.openapi import answers
from parley.api.shapes import Shape
from parley.api.state import AppState
from parley.conversations.assistants import resolve_tool_policy
from parley.identity import Caller
from parley.ids import new_id
from parley.interceptors.protocol import CallInfo, TurnInfo
from parley.tools.output import cap_output
from parley.tools.protocol import Reach, Tool, ToolContext
from parley.tools.workspaces import conversation_workspace, remove_workspace

router = APIRouter(tags=["langchain-chatchat"])

KB_TOOL = "search_local_knowledgebase"
TITLES = {KB_TOOL: "本地知识库", "calculate": "数学计算器"}
"""Chatchat's titles for the tools Parley has under Chatchat's names."""
CONFIGS: dict[str, dict[str, Any]] = {
    KB_TOOL: {"use": False, "top_k": 3, "score_threshold": 2.0},
    "calculate": {"use": False},
}
"""Chatchat's ``tool_settings`` defaults for those tools."""
TURN_ONLY = frozenset(
    {
        "kb_search",
        "kb_list",
        "memory_remember",
        "memory_recall",
        "memory_forget",
        "get_session_capabilities",
        "activate_tools",
    }
)
"""Tools that work only inside a chat turn: they act on the turn's knowledge bases,
memory scope or session, which a direct call and Chatchat's chat do not have."""
MAX_NAME = 200


class CallBody(BaseModel):
    name: str = Field(max_length=MAX_NAME, examples=["calculate"])
    tool_input: dict[str, Any] = Field(default_factory=dict, examples=[{"text": "3+5/2"}])


class ChatchatTool(Shape):
    name: str
    title: str
    description: str
    args: dict[str, dict[str, Any]]
    config: dict[str, Any]


class ToolsReply(Shape):
    code: int
    msg: str
    data: dict[str, ChatchatTool]


class CallReply(Shape):
    code: int
    msg: str
    data: Any = Field(description="The tool's output (JSON when it is JSON); null on failure.")


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """One direct call: ``data`` is the output parsed (JSON when it is JSON, the tool's
    own data when it gives it), ``text`` what a model would see."""

    name: str
    data: Any
    text: str
    is_error: bool


class NoSuchTool(LookupError):
    """The caller may not call a tool of that name here (``str``: the name)."""


# --- routes ------------------------------------------------------------------------------


@router.get("/tools", **answers(ToolsReply))
async def list_tools(request: Request) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    listed: dict[str, Any] = {}
    for tool in usable_tools(state):
        listed[tool.spec.name] = await _described(state, owner, tool)
    return reply(data=listed)


@router.post("/tools/call", **answers(CallReply))
async def call_tool_route(request: Request, body: CallBody) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    try:
        result = await call_tool(state, caller.owner, body.name, body.tool_input, caller=caller)
    except NoSuchTool:
        return reply(500, f"no tool named '{body.name}'")
    if result.is_error:
        return reply(500, f"failed to call tool '{body.name}': {result.text}")
    return reply(data=result.data)


# --- the tools ---------------------------------------------------------------------------


def usable_tools(state: AppState) -> list[Tool]:
    """The server tools a caller may call directly, in registration order."""
    approval = state.settings.tools.approval
    return [
        tool
        for tool in state.tools
        if tool.spec.name not in TURN_ONLY
        and resolve_tool_policy(None, approval, tool.spec.name) != "deny"
    ]


async def call_tool(
    state: AppState,
    owner: str,
    name: str,
    tool_input: dict[str, Any],
    *,
    caller: Caller | None = None,
) -> ToolCallResult:
    """Run the server tool ``name`` for ``owner`` as a turn would (interceptors, timeout,
    the output capped for ``text``). ``NoSuchTool`` when the caller may not call it
    here (``usable_tools``); a failure of the tool is a result with ``is_error``.
    ``data`` is the tool's own data (``DataOutput``) unless an interceptor replaced the
    output, else the output parsed."""
    tool = next((t for t in usable_tools(state) if t.spec.name == name), None)
    if tool is None:
        raise NoSuchTool(name)
    settings = state.settings
    call_id = new_id("call")
    scratch = f"tools-call-{call_id}"  # a folder of its own, gone when the call ends
    context = ToolContext(
        owner=owner,
        conversation_id=None,
        call_id=call_id,
        workspace=conversation_workspace(settings.workspace_dir, owner, scratch),
        settings=settings.tools,
        reach=Reach(knowledge=state.knowledge),
        messages=state.conversations,
    )
    turn = TurnInfo(caller=caller or Caller(owner), source="chatchat")
    info = CallInfo("tool", name, turn, purpose="tool", call_id=call_id)
    timeout = settings.tools.timeout_seconds
    try:
        async with asyncio.timeout(timeout):
            output = await state.interceptors.call_tool(tool, tool_input, context, info)
    except TimeoutError:
        return ToolCallResult(name, None, f"Tool '{name}' timed out after {timeout:g} s", True)
    finally:
        await remove_workspace(settings.workspace_dir, owner, scratch)
    text = cap_output(output.content, settings.tools.max_output_chars, settings.tools.head_fraction)
    if output.is_error:
        return ToolCallResult(name, None, text, True)
    data = output.data if isinstance(output, DataOutput) else _parsed(output.content)
    return ToolCallResult(name, data, text, False)


def _parsed(text: str) -> Any:
    """``text`` as JSON when it is JSON (a number too), else the text itself."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


# --- listing -----------------------------------------------------------------------------


async def _described(state: AppState, owner: str, tool: Tool) -> dict[str, Any]:
    """A tool as Chatchat's ``list_tools`` lists it."""
    spec = tool.spec
    args = {key: _arg(key, value) for key, value in spec.parameters.get("properties", {}).items()}
    if spec.name == KB_TOOL and state.knowledge is not None and "database" in args:
        args["database"]["choices"] = await base_names(state.knowledge, owner)
    return {
        "name": spec.name,
        "title": TITLES.get(spec.name) or title_of(spec.name),
        "description": spec.description,
        "args": args,
        "config": dict(CONFIGS.get(spec.name, {})),
    }


def title_of(name: str) -> str:
    """``web_fetch`` -> ``Web Fetch``: a readable title made of a name."""
    return " ".join(word.capitalize() for word in name.split("_") if word)


def _arg(name: str, schema: Any) -> dict[str, Any]:
    """One parameter's JSON schema with a ``title`` and a ``type``."""
    described = dict(schema) if isinstance(schema, dict) else {}
    described.setdefault("title", title_of(name))
    if not isinstance(described.get("type"), str):
        described["type"] = _type_of(described)
    return described


def _type_of(schema: dict[str, Any]) -> str:
    """The first type that is not null (of a list of types, or of an ``anyOf``);
    ``object`` for a reference to a model; else ``string``."""
    kind = schema.get("type")
    if isinstance(kind, list):
        return next((k for k in kind if isinstance(k, str) and k != "null"), "string")
    for option in schema.get("anyOf", ()):
        if isinstance(option, dict):
            if isinstance(option.get("type"), str) and option["type"] != "null":
                return str(option["type"])
            if "$ref" in option:
                return "object"
    return "object" if "$ref" in schema else "string"
