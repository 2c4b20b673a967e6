"""An ASGI app served by uvicorn on a loopback port, in a thread of this process.

For tests: a Parley app (``create_app``) or a mock upstream, reached over real HTTP by
real clients, without the second or so a process of its own costs to start. What a
process of its own is needed for (signals, ``kill -9``, its own environment) is
``parley serve``'s.
"""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar

import uvicorn
from starlette.types import ASGIApp

SERVING: ContextVar[LiveServer | None] = ContextVar("parley_live_server", default=None)
"""The server whose thread (or event loop task) is running, if any: tells one server's
log records from another's in one process."""


class LiveServer:
    """``app`` on ``http://127.0.0.1:<port>`` while started (a context manager), on a
    free port; or ``server``, a uvicorn server configured by the caller (Parley's own:
    ``parley.serving``).

    ``lifespan``: run the app's start-up and shut-down (a Parley app needs them). A
    start-up that fails raises here, with uvicorn's reason in the log."""

    def __init__(
        self,
        app: ASGIApp | None = None,
        *,
        server: uvicorn.Server | None = None,
        lifespan: bool = False,
        start_timeout: float = 60,
    ) -> None:
        if server is None:
            if app is None:
                raise ValueError("LiveServer needs an app or a server")
            config = uvicorn.Config(
                app,
                host="127.0.0.1",
                port=0,
                lifespan="on" if lifespan else "off",
                log_config=None,  # the process's logging stays as it is
                log_level="warning",
            )
            server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=self._run, name="live-server", daemon=True)
        self._start_timeout = start_timeout
        self.port = 0

    def _run(self) -> None:
        SERVING.set(self)  # tasks of the server's event loop inherit it (log capture)
        self._server.run()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        """Serve, once the socket listens (and the app started)."""
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the app did not start (its start-up failed; see the log)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the app did not start within {self._start_timeout:g} s")
            time.sleep(0.005)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self, timeout: float = 30) -> None:
        """Shut down (the app's own shut-down runs) and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=timeout)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
