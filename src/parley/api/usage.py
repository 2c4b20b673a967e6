"""``GET /v1/usage``: a key's usage today and this month (UTC), beside its limits.

A caller sees their own key's usage; an admin may name another key with ``key_id``.
The counters are the settled ones (calls still running are not in them yet). Limits
come from ``interceptors.usage_limits``; when that interceptor is off they are null
(usage is then not counted either, so the counters show what was counted while it
was on).

What does not belong here: counting and enforcing (``interceptors/builtins/
usage_limits.py``), the counters' storage (``store/usage.py``).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Query, Request

from parley.api.openapi import answers
from parley.api.shapes import Usage
from parley.api.state import AppState
from parley.errors import NotFound, PermissionDenied
from parley.identity import LOCAL_KEY
from parley.interceptors.builtins.usage_limits import limit_for
from parley.store.usage import PeriodUsage, UsageStore, period_end, periods

router = APIRouter(tags=["usage"])


@router.get("/v1/usage", **answers(Usage, errors=(404,)))
async def get_usage(
    request: Request,
    key_id: str | None = Query(default=None, max_length=64, description="Admins only."),
) -> dict[str, Any]:
    """Tokens, cost and calls of one key today and this month, with their limits."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    key_name = caller.key_name
    if key_id is None or key_id == caller.key_id:
        key_id = caller.key_id
    elif not caller.admin:
        raise PermissionDenied("only admins may read another key's usage", param="key_id")
    elif key_id == LOCAL_KEY:
        key_name = None
    else:
        found = next((key for key in await state.keys.list() if key.id == key_id), None)
        if found is None:
            raise NotFound(f"no API key with id {key_id!r}", param="key_id")
        key_name = found.name
    settings = state.settings.interceptors.usage_limits
    limit = limit_for(settings, key_id, key_name) if settings.enabled else None
    day, month = periods(time.time())
    today, this_month = await UsageStore(state.database).report(key_id, day, month)
    return {
        "object": "usage",
        "key_id": key_id,
        "key_name": key_name,
        "limits_enabled": settings.enabled,
        "day": _period(
            today,
            None if limit is None else limit.tokens_per_day,
            None if limit is None else limit.cost_per_day_usd,
        ),
        "month": _period(
            this_month,
            None if limit is None else limit.tokens_per_month,
            None if limit is None else limit.cost_per_month_usd,
        ),
    }


def _period(usage: PeriodUsage, tokens: int | None, cost: float | None) -> dict[str, Any]:
    return {
        "period": usage.period,
        "tokens": usage.tokens,
        "cost_usd": usage.cost_usd,
        "calls": usage.calls,
        "limit_tokens": tokens,
        "limit_cost_usd": cost,
        "resets_at": period_end(usage.period).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
