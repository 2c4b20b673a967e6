"""An ASGI app served on a free loopback port in a thread of its own: the mock upstreams'
server (``mock_openai``, ``mock_gemini``, ``mock_embeddings``)."""

from __future__ import annotations

from starlette.types import ASGIApp

from parley.testing.live import LiveServer


class Loopback:
    def __init__(self, app: ASGIApp) -> None:
        self._server = LiveServer(app)
        self.port = 0

    def start(self) -> int:
        """Serve, once the socket listens; its port."""
        self.port = self._server.start().port
        return self.port

    def stop(self) -> None:
        self._server.stop(timeout=10)
