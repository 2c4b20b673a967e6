"""The floor relay: the least a Python relay can do, as the benchmark's yardstick.

Raw ASGI, served by uvicorn with uvloop and httptools like Parley, and the same HTTP
client (httpx). It forwards the request body to the upstream and the upstream's bytes
back, parsing and storing nothing.

Run alone: ``python -m parley.bench.floor --port 9101 --upstream http://127.0.0.1:9100``.
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import uvicorn


def create_floor(upstream: str) -> Any:
    client = httpx.AsyncClient(
        base_url=upstream, timeout=600, limits=httpx.Limits(max_connections=None)
    )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = client.build_request(
            scope["method"],
            scope["path"],
            content=body,
            headers={"content-type": "application/json"},
        )
        response = await client.send(request, stream=True)
        try:
            headers = [(b"content-type", response.headers.get("content-type", "").encode())]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": headers}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9101)
    parser.add_argument("--upstream", default="http://127.0.0.1:9100")
    args = parser.parse_args()
    uvicorn.run(
        create_floor(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        lifespan="off",
        backlog=4096,
    )


if __name__ == "__main__":
    main()
