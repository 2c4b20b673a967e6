"""MCP server tools as Parley tools, and their results as ``ToolOutput``.

``McpTool`` offers one server tool to the model as ``mcp__{server}__{tool}`` with the
server's description and input schema, and runs it through the server's
``McpConnection``. Every failure (timeout, disconnect, protocol error) becomes an error
``ToolOutput`` the model sees; nothing raises out of ``run``. ``to_output`` converts the
SDK's ``CallToolResult``: text joined, structured content as JSON, images and audio as a
short placeholder, embedded resources' text, all capped in size.

What does not belong here: the connection itself (``client.py``), which tools of a
listing are fit to offer (``listing.py``), which servers a request may use (above).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from parley.mcp.client import McpClientError, McpConnection
from parley.mcp.listing import ToolInfo
from parley.messages import ToolSpec
from parley.tools.protocol import ToolContext, ToolOutput

DEFAULT_MAX_CHARS = 100_000
STDERR_MARK = "; stderr: "
"""Where a connection error's stderr tail begins (``client.py`` appends it last)."""
_NAME_LIMIT = 64
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """``mcp__{server}__{tool}``, limited to ``[a-zA-Z0-9_-]`` and 64 characters."""
    name = f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    return name[:_NAME_LIMIT]


def to_output(result: types.CallToolResult, max_chars: int = DEFAULT_MAX_CHARS) -> ToolOutput:
    """The model's view of a tool result, capped at ``max_chars`` characters."""
    parts = [_describe_content(block) for block in result.content]
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    structured = result.structured_content
    if structured is not None and not _shown_in(structured, texts):
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(part for part in parts if part)
    if not text and result.is_error:
        text = "The tool failed without a message."
    return ToolOutput(content=cap(text, max_chars), is_error=bool(result.is_error))


def _shown_in(structured: dict[str, Any], texts: list[str]) -> bool:
    """Whether a text block already carries the structured content (servers are asked to
    send both; the SDK's ``MCPServer`` wraps a plain value as ``{"result": value}``)."""
    candidates: list[Any] = [structured]
    if list(structured) == ["result"]:
        candidates.append(structured["result"])
    for text in texts:
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        if any(parsed == candidate or text == str(candidate) for candidate in candidates):
            return True
    return False


def cap(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, with a note saying how much was cut."""
    if len(text) <= max_chars:
        return text
    note = f"\n[output truncated: showing {{shown:,}} of {len(text):,} characters]"
    shown = max(0, max_chars - len(note.format(shown=max_chars)))
    return text[:shown] + note.format(shown=shown)


def _describe_content(block: types.ContentBlock) -> str:
    match block:
        case types.TextContent():
            return block.text
        case types.ImageContent():
            return f"[image: {block.mime_type}, {_decoded_size(block.data):,} bytes]"
        case types.AudioContent():
            return f"[audio: {block.mime_type}, {_decoded_size(block.data):,} bytes]"
        case types.ResourceLink():
            return f"[resource link: {block.uri}]"
        case types.EmbeddedResource():
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                return resource.text
            mime = resource.mime_type or "application/octet-stream"
            return f"[resource {resource.uri}: {mime}, {_decoded_size(resource.blob):,} bytes]"
        case _:
            return f"[{type(block).__name__}]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return len(data)


@dataclass(frozen=True, slots=True)
class McpTool:
    """One MCP server tool, as a Parley ``Tool``."""

    connection: McpConnection
    info: ToolInfo
    max_chars: int = DEFAULT_MAX_CHARS

    @property
    def spec(self) -> ToolSpec:
        schema = dict(self.info.input_schema) or {"type": "object", "properties": {}}
        schema.setdefault("type", "object")
        return ToolSpec(
            name=tool_name(self.connection.config.name, self.info.name),
            description=self.info.description,
            parameters=schema,
        )

    @property
    def pinned(self) -> bool:
        return False

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            result = await self.connection.call(
                self.info.name, arguments, self.connection.config.timeout_seconds
            )
        except McpClientError as exc:
            # the server's stderr may name paths or hold secrets: it stays in last_error,
            # for admins (GET /v1/mcp/servers), and is not shown to the model or the user
            return ToolOutput(content=str(exc).split(STDERR_MARK, 1)[0], is_error=True)
        except Exception as exc:
            return ToolOutput(
                content=f"MCP tool {self.info.name!r} failed: {type(exc).__name__}: {exc}",
                is_error=True,
            )
        return to_output(result, self.max_chars)


async def server_tools(
    connection: McpConnection, max_chars: int = DEFAULT_MAX_CHARS
) -> list[McpTool]:
    """The server's tools as Parley tools (raises ``McpClientError`` if unreachable)."""
    return [McpTool(connection, info, max_chars) for info in await connection.list_tools()]
