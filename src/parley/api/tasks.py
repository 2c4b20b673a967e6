"""``POST /v1/tasks``: run the agent loop on a task description (octos's ``run_task``).

A task is a conversation of one user message (the task) that the agent works on with
the server tools it is given, as many steps as it takes within the budgets. Without
``stream`` the response is the finished task; with it, progress streams exactly like
``/v1/chat/completions`` (text deltas, and tool activity in the extension fields).
The conversation is stored, so the work can be read or continued later.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from starlette.responses import Response

from parley.api.chat import STREAM, read_body
from parley.api.completion_shapes import Task
from parley.api.errors import validation_error
from parley.api.openapi import answers, json_body
from parley.api.replies import completion_body, finished, stream_response
from parley.api.state import AppState
from parley.conversations.turns import ChatTurn
from parley.errors import InvalidRequest
from parley.mcp.service import is_mcp_tool
from parley.messages import Message, text_message

router = APIRouter(tags=["tasks"])


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, description="What the agent should do.")
    model: str | None = None
    tools: list[str] | None = Field(
        default=None,
        description="Server tools to use, MCP tools (mcp__{server}__{tool}, mcp__{server}__*) "
        "included; default: the configured defaults.",
    )
    use_mcp: StrictBool = Field(
        default=False,
        description="Also every enabled MCP server's tools (a task gets only "
        "the tools it names unless this is set).",
    )
    system: str | None = Field(default=None, description="Instructions placed before the task.")
    max_tokens: int | None = Field(default=None, ge=1, description="Per model call.")
    stream: StrictBool = False


@router.post(
    "/v1/tasks",
    openapi_extra=json_body(
        TaskRequest,
        examples={
            "result": {"task": "Say hello."},
            "streamed": {"task": "Say hello.", "stream": True},
        },
    ),
    **answers(Task, errors=(404, 408, 413, 429, 502, 503, 504), content=STREAM),
)
async def run_task(request: Request) -> Response:
    """Run the agent on a task and return (or stream) the result."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    raw = await read_body(request, state.settings.server.max_body_bytes)
    try:
        body = TaskRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if not body.task.strip():
        raise InvalidRequest("the task is empty", param="task")
    if len(body.task) > state.settings.chat.max_message_chars:
        raise InvalidRequest("the task is too long", param="task", code="message_too_long")
    limit = state.settings.chat.max_tokens_limit
    if body.max_tokens is not None and body.max_tokens > limit:
        raise InvalidRequest(
            f"max_tokens is larger than this server allows ({limit})", param="max_tokens"
        )
    for index, name in enumerate(body.tools or ()):
        if name not in state.tools and not is_mcp_tool(name):  # MCP: checked by the service
            raise InvalidRequest(
                f"unknown server tool {name!r}", param=f"tools.{index}", code="unknown_tool"
            )
    messages: tuple[Message, ...] = (text_message("user", body.task),)
    if body.system:
        messages = (text_message("system", body.system), *messages)
    turn = ChatTurn(
        owner=caller.owner,
        caller=caller,
        source="tasks",
        model=body.model,
        messages=messages,
        server_tools=tuple(body.tools or ()),
        use_mcp=body.use_mcp,
        max_tokens=body.max_tokens,
        stream=body.stream,
    )
    generation = await state.service.prepare(turn)
    if body.stream:
        return stream_response(state, generation, include_usage=True)
    reply = await finished(state, generation, request)
    completion = completion_body(generation, reply)
    stopped = reply.result.stop
    result: dict[str, Any] = {
        "id": f"task_{generation.message_id}",
        "object": "task",
        "created": generation.created,
        "model": generation.model.public_name,
        "status": "stopped" if stopped else "completed",
        "result": completion["choices"][0]["message"]["content"],
        "finish_reason": completion["choices"][0]["finish_reason"],
        "steps": completion["parley"]["tools"],
        "usage": completion["usage"],
        "parley": {k: v for k, v in completion["parley"].items() if k != "tools"},
    }
    return Response(orjson.dumps(result), media_type="application/json")
