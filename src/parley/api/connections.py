"""HTTP/1.1 connections with a deadline for their headers.

uvicorn closes an idle kept-alive connection, but a connection that sends its request
headers slowly (or nothing at all) is kept for ever: a few thousand of them, one byte a
minute each, use up the server's file descriptors (slowloris). ``protocol(seconds)`` is
uvicorn's httptools protocol with one timer more: from the moment a connection opens,
or a response ends, its next request's headers must be complete within ``seconds``, or
the connection is closed. Bodies are the admission middleware's to time
(``api/admission.py``). Behind a proxy, set its timeouts too (nginx:
``client_header_timeout``, ``client_body_timeout``).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _Deadlined(HttpToolsProtocol):
    header_seconds = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def protocol(header_seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing connections whose headers take too long."""
    return type("HeaderDeadlineProtocol", (_Deadlined,), {"header_seconds": header_seconds})
