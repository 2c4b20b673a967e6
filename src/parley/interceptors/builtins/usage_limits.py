"""The usage-limit interceptor (order 50, security band: it fails closed): tokens and
cost per API key, per UTC day and per UTC month.

Before a model call, the call's size is estimated (the prompt from its text, about four
characters a token plus four a message; the reply as ``reserve_output_tokens``, or the
request's ``max_tokens`` when that is smaller) and priced with the upstream model's
price. The call runs only if the key's settled usage (``store/usage.py``), plus what
this process's calls in flight have reserved, plus this estimate stays within every
limit; the estimate is then reserved. After the call its real usage (the upstream's
token counts and cost) is settled into the counters and the reservation released. A
failed call is released without charge, unless the upstream reported usage before it
failed (that is settled) or it was abandoned after the upstream was asked
(``CallCancelled``): the upstream has billed the prompt, so the prompt's estimate is
settled. A call counts in
the day and month it started in.

The check and the reservation happen under a per-key lock that settling takes too, so
concurrent calls cannot all slip under a limit. With several instances (``redis.url``)
the reservations and the lock are in Redis (``parley.holds``): every instance sees the
others' calls in flight, and the limit holds across them.

A model with no price costs 0 here (a warning says once per model that cost limits
cannot see it). A key whose limit sets nothing is unlimited and never touches the
database.

What does not belong here: the counters' storage (``store/usage.py``), the HTTP view of
usage (``api/usage.py``), request rate limiting and admission (``api/admission.py``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from parley.errors import ConfigurationError, ParleyError
from parley.holds import Held, Holds, LocalHolds, holds_for
from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    Interceptor,
    ModelResponse,
    Services,
)
from parley.messages import (
    CitationPart,
    ImagePart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    Usage,
)
from parley.providers.pricing import PriceCatalog, usage_cost
from parley.providers.protocol import ModelRequest
from parley.settings.interceptors import UsageLimit, UsageLimitSettings
from parley.store.usage import UsageStore, period_end, periods

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_PER_IMAGE = 765
"""What a 1024x1024 image costs on OpenAI's high detail: a generous guess for any image."""


class UsageLimitExceeded(ParleyError):
    """A key has used what its limit allows for the day or the month."""

    status = 429
    type = "rate_limit_error"
    code = "usage_limit_exceeded"


def limit_for(settings: UsageLimitSettings, key_id: str, key_name: str | None) -> UsageLimit:
    """The limit of a key: its entry by id, else by name, else the default."""
    found = settings.keys.get(key_id)
    if found is None and key_name is not None:
        found = settings.keys.get(key_name)
    return settings.default if found is None else found


def is_unlimited(limit: UsageLimit) -> bool:
    return (
        limit.tokens_per_day is None
        and limit.tokens_per_month is None
        and limit.cost_per_day_usd is None
        and limit.cost_per_month_usd is None
    )


def estimate_input_tokens(request: ModelRequest) -> int:
    """A cheap guess at the prompt's size: its text at four characters a token, four
    tokens a message, a fixed count an image, and the tools' names and descriptions."""
    chars = 0
    images = 0
    for message in request.messages:
        for part in message.parts:
            match part:
                case TextPart(text=text) | ReasoningPart(text=text):
                    chars += len(text)
                case ToolCallPart():
                    chars += len(part.name) + len(part.arguments)
                    if part.result is not None:
                        chars += len(part.result.content)
                case ImagePart():
                    images += 1
                case CitationPart():
                    chars += len(part.title) + len(part.excerpt)
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description)
    return (
        chars // CHARS_PER_TOKEN
        + TOKENS_PER_MESSAGE * len(request.messages)
        + TOKENS_PER_IMAGE * images
    )


@dataclass(slots=True)
class _Reservation:
    """One call's hold on its key's allowance, kept in ``call.data`` until settled."""

    key_id: str
    day: str
    month: str
    model: str
    input_tokens: int
    output_tokens: int
    input_cost: float
    cost: float
    """The estimate's price (0 for an unpriced model)."""
    released: bool = False
    hold_id: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class _Check:
    per: str
    """``day`` or ``month``."""
    period: str
    is_cost: bool
    limit: float
    used: float
    held: float
    needs: float

    @property
    def exceeded(self) -> bool:
        return self.used + self.held + self.needs > self.limit


class UsageLimiter(Interceptor):
    name = "usage_limits"

    def __init__(
        self, settings: UsageLimitSettings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.order = settings.order
        self._settings = settings
        self._clock = clock
        self._store: UsageStore | None = None
        self._pricing = PriceCatalog()
        self._holds: Holds = LocalHolds()
        self._in_flight = 0
        self._unpriced: set[str] = set()

    async def startup(self, services: Services) -> None:
        if services.database is None:
            raise ConfigurationError("interceptors.usage_limits needs the database")
        self._store = UsageStore(services.database)
        self._pricing = services.pricing
        self._holds = holds_for(services.cluster)

    def describe(self) -> dict[str, Any]:
        return {
            "default": self._settings.default.model_dump(),
            "keys": len(self._settings.keys),
            "calls_in_flight": self._in_flight,  # this instance's
        }

    # --- hooks ------------------------------------------------------------------------

    async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
        caller = call.caller
        limit = limit_for(self._settings, caller.key_id, caller.key_name)
        if is_unlimited(limit):
            return
        store = self._started()
        model = call.upstream_model or request.model
        input_tokens = estimate_input_tokens(request)
        # The reply's share: the request's cap, but no more than reserve_output_tokens
        # (the chat API always sets a cap, 4,096 by default, which few replies use).
        reserve = self._settings.reserve_output_tokens
        output_tokens = reserve if request.max_tokens is None else min(request.max_tokens, reserve)
        input_cost, cost = self._estimate_cost(model, input_tokens, output_tokens, limit)
        now = self._clock()
        day, month = periods(now)
        reservation = _Reservation(
            caller.key_id, day, month, model, input_tokens, output_tokens, input_cost, cost
        )
        async with self._holds.locked(caller.key_id):
            totals = await store.totals(caller.key_id, day, month)
            held = await self._holds.held(caller.key_id)
            for check in _checks(limit, reservation, totals, held):
                if check.exceeded:
                    raise _exceeded(check, caller.key_name or caller.key_id, now)
            call.data[self] = reservation
            await self._hold(reservation)

    async def after_response(self, response: ModelResponse, call: CallInfo) -> None:
        reservation: _Reservation | None = call.data.pop(self, None)
        if reservation is None:
            return
        usage = response.usage
        tokens = reservation.tokens if usage is None else usage.total_tokens
        cost = response.cost_usd
        if cost is None and usage is not None:
            cost = self._pricing.cost(reservation.model, usage)
        await self._settle(reservation, tokens, reservation.cost if cost is None else cost)

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        reservation: _Reservation | None = call.data.pop(self, None)
        if reservation is None:
            return
        usage = call.usage
        if usage is not None:
            # The upstream reported what it spent before the call failed (or before an
            # interceptor refused the reply): that is what counts.
            cost = self._pricing.cost(reservation.model, usage)
            await self._settle(
                reservation, usage.total_tokens, reservation.cost if cost is None else cost
            )
        elif isinstance(error, CallCancelled) and call.opened:
            # Abandoned mid-way: the upstream has read (and billed) the prompt.
            await self._settle(reservation, reservation.input_tokens, reservation.input_cost)
        else:
            await self._release(reservation)

    # --- reservations -----------------------------------------------------------------

    def _started(self) -> UsageStore:
        if self._store is None:
            raise RuntimeError("the usage_limits interceptor was used before startup")
        return self._store

    def _estimate_cost(
        self, model: str, input_tokens: int, output_tokens: int, limit: UsageLimit
    ) -> tuple[float, float]:
        """(the prompt's cost, the whole call's cost) at the model's price."""
        price = self._pricing.price(model)
        if price is None:
            has_cost_limit = (
                limit.cost_per_day_usd is not None or limit.cost_per_month_usd is not None
            )
            if has_cost_limit and model not in self._unpriced:
                self._unpriced.add(model)
                log.warning(
                    "usage limits: model %r has no price, so cost limits cannot see its "
                    "calls (their tokens still count); add it to `pricing`",
                    model,
                )
            return 0.0, 0.0
        return (
            usage_cost(price, Usage(input_tokens=input_tokens)),
            usage_cost(price, Usage(input_tokens=input_tokens, output_tokens=output_tokens)),
        )

    async def _hold(self, reservation: _Reservation) -> None:
        await self._holds.hold(
            reservation.key_id, reservation.hold_id, reservation.tokens, reservation.cost
        )
        self._in_flight += 1

    async def _release(self, reservation: _Reservation) -> None:
        if reservation.released:
            return
        reservation.released = True
        self._in_flight -= 1
        await self._holds.release(reservation.key_id, reservation.hold_id)

    async def _settle(self, reservation: _Reservation, tokens: int, cost: float) -> None:
        """Count the call's usage, then release its reservation (both under the key's
        lock, so a check never sees the call in neither place). A failed write is
        logged: the reply has been given, and the call is not failed afterwards."""
        store = self._started()
        try:
            async with self._holds.locked(reservation.key_id):
                await store.add(
                    reservation.key_id, reservation.day, reservation.month, tokens, cost
                )
                await self._release(reservation)
        except Exception:
            log.exception(
                "usage limits: the usage of a call by key %s was not recorded (%d tokens, $%.6f)",
                reservation.key_id,
                tokens,
                cost,
            )
        finally:
            await asyncio.shield(self._release(reservation))


def _checks(
    limit: UsageLimit,
    reservation: _Reservation,
    totals: tuple[int, float, int, float],
    held: Held,
) -> list[_Check]:
    """The limits that are set, months first (when both are reached, the month's reset
    is the one worth waiting for)."""
    day_tokens, day_cost, month_tokens, month_cost = totals
    r = reservation
    candidates = [
        ("month", r.month, False, limit.tokens_per_month, month_tokens, held.tokens, r.tokens),
        ("month", r.month, True, limit.cost_per_month_usd, month_cost, held.cost, r.cost),
        ("day", r.day, False, limit.tokens_per_day, day_tokens, held.tokens, r.tokens),
        ("day", r.day, True, limit.cost_per_day_usd, day_cost, held.cost, r.cost),
    ]
    return [
        _Check(per, period, is_cost, value, used, in_flight, needs)
        for per, period, is_cost, value, used, in_flight, needs in candidates
        if value is not None
    ]


def _exceeded(check: _Check, key: str, now: float) -> UsageLimitExceeded:
    amount = _usd if check.is_cost else _tokens
    unit = "" if check.is_cost else " tokens"
    used = f"used {amount(check.used)}"
    if check.held > 0:
        used += f" and {amount(check.held)} more held by calls in progress"
    resets = period_end(check.period)
    limit = f"{amount(check.limit)}{unit} per {check.per}"
    if check.needs > check.limit:  # waiting will not help
        message = (
            f"This request is larger than the usage limit of key {key!r}: {limit}, and it "
            f"needs about {amount(check.needs)} on its own"
            + ("" if check.is_cost else " (lower max_tokens or shorten the conversation)")
            + "."
        )
    else:
        message = (
            f"Usage limit reached for key {key!r}: {limit} ({used}, this request needs about "
            f"{amount(check.needs)}). It resets at {_when(resets)}."
        )
    return UsageLimitExceeded(message, retry_after=max(1.0, resets.timestamp() - now))


def _tokens(value: float) -> str:
    return f"{round(value):,}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")
