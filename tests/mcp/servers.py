"""Real MCP servers for the tests, written with the SDK's ``MCPServer``.

Run as a script it serves over stdio; ``python servers.py http PORT`` serves streamable
HTTP at ``/mcp`` (``--no-get``: without the optional GET stream, answering it 405) and
``python servers.py sse PORT`` the older SSE transport at ``/sse``, both on 127.0.0.1.
``build()`` gives the server itself, for an app served in the test's own process.
``python servers.py odd`` serves ``ODD_TOOLS`` over stdio with the SDK's low-level
``Server``, which lists whatever schemas it is given (``MCPServer`` makes valid ones).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

WIRE: int | None = None
"""Run as a stdio server: a duplicate of the original stdout, the wire to the client. (The
SDK points fd 1 at stderr while it serves, so that a stray print cannot corrupt the wire;
``garble`` means to.)"""

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a7b5e3f9"
    "0000000049454e44ae426082"
)


class Weather(BaseModel):
    city: str
    celsius: float


def build() -> MCPServer:
    server = MCPServer("echo", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def weather(city: str) -> Weather:
        """Structured weather for a city."""
        return Weather(city=city, celsius=21.5)

    @server.tool()
    def picture() -> Image:
        """A tiny PNG."""
        return Image(data=PNG, format="png")

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"broken on purpose: {reason}")

    @server.tool()
    async def hang(seconds: float) -> str:
        """Sleeps (longer than any test timeout)."""
        await asyncio.sleep(seconds)
        return "woke up"

    @server.tool()
    def big(chars: int) -> str:
        """Returns a lot of text."""
        return "x" * chars

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def exit_soon() -> str:
        """Exits the process shortly after answering."""
        threading.Timer(0.1, os._exit, (0,)).start()
        return "bye"

    @server.tool()
    def env(name: str) -> str:
        """An environment variable, or '<unset>'."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    def crash(marker: str) -> str:
        """Appends a line to the file ``marker``, then exits without answering."""
        with open(marker, "a") as file:
            file.write(f"{os.getpid()}\n")
        os._exit(1)

    @server.tool()
    def garble(text: str) -> str:
        """Writes junk to stdout (stdio only: lines that are not JSON, JSON that is not
        JSON-RPC, an answer to a request never made, invalid UTF-8), then answers."""
        assert WIRE is not None, "garble needs the stdio server"
        os.write(
            WIRE,
            b"hello, this is not json\n"
            b"\n"
            b'{"hello": "world"}\n'
            b'{"jsonrpc": "2.0", "id": 987654, "result": {}}\n'
            b"\xff\xfe\x80 not utf-8\n"
            b"[1, 2, 3\n",
        )
        return text

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """An HTTP request header, or '<none>'."""
        headers = ctx.headers or {}
        return headers.get(name, "<none>")

    return server


ODD_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "fine": ("A tool with a good schema.", {"type": "object", "properties": {"a": {}}}),
    "wordy": ("w" * 10_000, {"type": "object"}),
    "patterned": (  # a JavaScript pattern Python's re cannot compile: formats are not checked
        "A pattern.",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\\p{L}+$"}}},
    ),
    "banana": (
        "Invalid JSON Schema.",
        {"type": "object", "properties": {"a": {"type": "banana"}}},
    ),
    "negative": (
        "A negative length.",
        {"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}},
    ),
    "huge": (
        "A schema over 64 KB.",
        {"type": "object", "properties": {f"p{i}": {"description": "d" * 100} for i in range(700)}},
    ),
}
"""Tools by name: (description, input schema); the first three are usable. (The SDK's
client refuses a whole listing with a tool whose schema is not ``type: object``, so such
a tool cannot be served here: ``tests/mcp/test_client.py`` checks those rules alone.)"""


def serve_odd() -> None:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = [
            types.Tool(name=name, description=description, input_schema=schema)
            for name, (description, schema) in ODD_TOOLS.items()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=f"called {params.name}")])

    server: Server[Any] = Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def serve(transport: str, port: int, with_get: bool = True) -> None:
    import uvicorn

    server = build()
    app: Any = server.sse_app() if transport == "sse" else server.streamable_http_app()
    if not with_get:
        app = _without_get(app)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="none")


def _without_get(app: Any) -> Any:
    """Streamable HTTP without the GET stream: the spec lets a server answer it 405."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return wrapped


if __name__ == "__main__":
    if sys.argv[1:] == ["odd"]:
        serve_odd()
    elif len(sys.argv) > 2:
        serve(sys.argv[1], int(sys.argv[2]), with_get="--no-get" not in sys.argv)
    else:
        WIRE = os.dup(1)
        build().run()
