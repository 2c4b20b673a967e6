"""uvicorn as Parley runs it: one configuration for ``parley serve`` and for a server in
a test's thread (``parley.testing``), so both speak HTTP alike (header timeouts, the
event loop, graceful shutdown)."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from parley.api.connections import protocol
from parley.api.logs import SecretQueryFilter
from parley.pacer import pace_garbage_collection
from parley.settings import Settings


def uvicorn_config(
    app: Any, settings: Settings, *, log_config: dict[str, Any] | None = LOGGING_CONFIG
) -> uvicorn.Config:
    """``app`` served on ``settings.server``'s address (``log_config`` None: the process's
    logging stays as it is). The access log never shows a key sent in a query string."""
    config = uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        log_config=log_config,
        loop="uvloop",
        http=protocol(settings.server.header_timeout_seconds),
        # Parley ends its own turns within the grace period; uvicorn waits a little longer.
        timeout_graceful_shutdown=int(settings.agent.shutdown_grace_seconds) + 5,
    )
    # after uvicorn.Config, which configures its loggers
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, SecretQueryFilter) for f in access.filters):
        access.addFilter(SecretQueryFilter())
    return config


class ParleyUvicorn(uvicorn.Server):
    """uvicorn, telling Parley the moment SIGTERM or SIGINT arrives: new turns are
    refused and agent loops stop at their next step while streams finish.

    ``pace_gc``: the process is the server's own (``parley serve``): once started, its
    start-up objects are frozen out of garbage collection and collection is paced
    (``parley.pacer``). Never in a process that hosts other work (a test run)."""

    def __init__(self, config: uvicorn.Config, *, pace_gc: bool = False) -> None:
        super().__init__(config)
        self._pace_gc = pace_gc
        self._pacer: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._pace_gc:
            # start-up objects live as long as the process: out of every collection
            gc.collect()
            gc.freeze()
            self._pacer = asyncio.create_task(pace_garbage_collection())

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._pacer is not None:
            self._pacer.cancel()
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = getattr(getattr(self.config.app, "state", None), "parley", None)
        if state is not None:
            grace = state.settings.agent.shutdown_grace_seconds
            state.service.request_shutdown(grace)
        super().handle_exit(sig, frame)
