"""A round-robin TCP proxy on loopback, standing where a load balancer stands in front
of several instances: each new connection goes to the next upstream that accepts it (a
dead one is skipped), and bytes are relayed both ways until either side closes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence

from tests.support.server import free_port


class RoundRobinProxy:
    def __init__(self, upstreams: Sequence[int]) -> None:
        self.upstreams = list(upstreams)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._next = 0
        self.served: list[int] = []
        """The upstream port of each connection, in the order they came."""
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._relays: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-proxy")

    def __enter__(self) -> RoundRobinProxy:
        self._thread.start()
        assert self._started.wait(10), "the proxy did not start"
        return self

    def __exit__(self, *_: object) -> None:
        """Close every connection (a socket left to the collector warns in whichever
        test runs then), then stop."""
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._relays):
            task.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self._started.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream = await self._connect()
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        self._writers.add(up_writer)
        task = asyncio.create_task(_relay(reader, writer, up_reader, up_writer))
        self._relays.add(task)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            self._relays.discard(task)
            for side in (writer, up_writer):
                side.close()
                with contextlib.suppress(Exception):
                    await side.wait_closed()
                self._writers.discard(side)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in range(len(self.upstreams)):
            port = self.upstreams[self._next % len(self.upstreams)]
            self._next += 1
            with contextlib.suppress(OSError):
                connection = await asyncio.open_connection("127.0.0.1", port)
                self.served.append(port)
                return connection
        return None


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sink.close()


@contextlib.contextmanager
def proxied(ports: Sequence[int]) -> Iterator[RoundRobinProxy]:
    with RoundRobinProxy(ports) as proxy:
        yield proxy
