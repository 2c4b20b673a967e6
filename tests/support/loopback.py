"""An ASGI app served on a free loopback port in a thread of its own: the mock upstreams'
server (``mock_openai``, ``mock_gemini``, ``mock_embeddings``)."""

from __future__ import annotations

import threading

import uvicorn
from starlette.types import ASGIApp


class Loopback:
    def __init__(self, app: ASGIApp) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.port = 0

    def start(self) -> int:
        """Serve, once the socket listens; its port."""
        self._thread.start()
        while not self._server.started:
            threading.Event().wait(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self.port

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
