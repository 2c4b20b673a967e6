"""``GET /ready``: whether a load balancer should send this instance requests.

``/health`` stays liveness (the process answers). Readiness also asks the database
(a ``SELECT 1``) and, with several instances, Redis, each within ``CHECK_SECONDS``, and
turns false as soon as shutdown begins (SIGTERM), while the replies in progress finish:
a rolling restart takes the instance out of rotation before it stops. 503 when not
ready, with what failed.

What does not belong here: the shutdown itself (``ConversationService.shutdown``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from parley.api.state import AppState

log = logging.getLogger(__name__)

CHECK_SECONDS = 2.0


async def readiness(request: Request) -> JSONResponse:
    state: AppState = request.app.state.parley
    database = await _check(state.database.read(lambda conn: conn.execute(text("SELECT 1"))))
    redis = await _check(state.cluster.ping()) if state.cluster.shared else "not configured"
    accepting = not state.service.shutting_down
    ready = accepting and database == "ok" and redis in ("ok", "not configured")
    body = {
        "status": "ready" if ready else "not_ready",
        "database": database,
        "redis": redis,
        "accepting": accepting,
    }
    return JSONResponse(body, status_code=200 if ready else 503)


async def _check(work: Awaitable[Any]) -> str:
    try:
        await asyncio.wait_for(work, CHECK_SECONDS)
    except TimeoutError:
        return f"no answer within {CHECK_SECONDS:g} s"
    except Exception as exc:
        log.warning("readiness check failed: %s", exc)
        return f"failed: {type(exc).__name__}"
    return "ok"
