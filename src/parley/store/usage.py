"""Usage counters: tokens, cost and calls per API key, per UTC day and per UTC month.

One row per (key id, period) in ``usage_counters``; a period is ``YYYY-MM-DD`` (a UTC
day) or ``YYYY-MM`` (a UTC month), and every call is added to both rows of its key in
one write transaction. The increment is an upsert: SQLite and PostgreSQL use their own
``ON CONFLICT DO UPDATE`` (safe when several server processes share the database);
any other engine updates the row and inserts it when there was none.

What does not belong here: deciding whether a call may run and reserving for calls
still in flight (``interceptors/builtins/usage_limits.py``), the HTTP view
(``api/usage.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy import insert as generic_insert
from sqlalchemy.dialects import postgresql, sqlite

from parley.store.database import Database
from parley.store.schema import usage_counters


def periods(at: float) -> tuple[str, str]:
    """The day and the month (UTC) that the Unix time ``at`` falls in."""
    moment = datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%d"), moment.strftime("%Y-%m")


def period_end(period: str) -> datetime:
    """When a period is over: the next UTC midnight after a day, the first of the next
    month after a month."""
    if len(period) == len("YYYY-MM"):
        year, month = (int(part) for part in period.split("-"))
        return datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return datetime.strptime(period, "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=1)


@dataclass(frozen=True, slots=True)
class PeriodUsage:
    """What one key has used in one period (zeros when nothing was recorded)."""

    period: str
    tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0


class UsageStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def report(self, key_id: str, day: str, month: str) -> tuple[PeriodUsage, PeriodUsage]:
        """The key's usage in ``day`` and in ``month``."""
        table = usage_counters.c
        query = select(table.period, table.tokens, table.cost_usd, table.calls).where(
            table.key_id == key_id, table.period.in_((day, month))
        )

        def run(conn: Connection) -> dict[str, PeriodUsage]:
            return {
                row.period: PeriodUsage(row.period, int(row.tokens), float(row.cost_usd), row.calls)
                for row in conn.execute(query)
            }

        found = await self._db.read(run)
        return found.get(day, PeriodUsage(day)), found.get(month, PeriodUsage(month))

    async def totals(self, key_id: str, day: str, month: str) -> tuple[int, float, int, float]:
        """(tokens, cost) in ``day``, then (tokens, cost) in ``month``."""
        today, this_month = await self.report(key_id, day, month)
        return today.tokens, today.cost_usd, this_month.tokens, this_month.cost_usd

    async def add(
        self, key_id: str, day: str, month: str, tokens: int, cost_usd: float, *, calls: int = 1
    ) -> None:
        """Add one call's usage to the key's ``day`` and ``month`` rows (made if missing)."""
        now = time.time()

        def transaction(conn: Connection) -> None:
            for period in (day, month):
                _increment(conn, key_id, period, tokens, cost_usd, calls, now)

        await self._db.write(transaction)


def _increment(
    conn: Connection,
    key_id: str,
    period: str,
    tokens: int,
    cost_usd: float,
    calls: int,
    now: float,
) -> None:
    table = usage_counters.c
    row: dict[str, Any] = {
        "key_id": key_id,
        "period": period,
        "tokens": tokens,
        "cost_usd": cost_usd,
        "calls": calls,
        "updated_at": now,
    }
    added = {
        "tokens": table.tokens + tokens,
        "cost_usd": table.cost_usd + cost_usd,
        "calls": table.calls + calls,
        "updated_at": now,
    }
    keys = ["key_id", "period"]
    dialect = conn.dialect.name
    if dialect == "sqlite":
        upsert = sqlite.insert(usage_counters).values(**row)
        conn.execute(upsert.on_conflict_do_update(index_elements=keys, set_=added))
        return
    if dialect == "postgresql":
        upsert_pg = postgresql.insert(usage_counters).values(**row)
        conn.execute(upsert_pg.on_conflict_do_update(index_elements=keys, set_=added))
        return
    changed = conn.execute(
        update(usage_counters).where(table.key_id == key_id, table.period == period).values(**added)
    )
    if not changed.rowcount:
        conn.execute(generic_insert(usage_counters).values(**row))
