"""Real MCP servers for the tests, written with the SDK's ``MCPServer``.

Run as a script it serves over stdio; ``build()`` gives the server for streamable HTTP.
"""

from __future__ import annotations

import asyncio
import os
import threading

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

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

    return server


if __name__ == "__main__":
    build().run()
