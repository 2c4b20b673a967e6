"""Per-key usage limits: the counters in a real SQLite database, reservations under
concurrency, settling from real usage, and the 429 a client is given."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any

import pytest

from parley.api.errors import error_response
from parley.errors import InvalidRequest, ProviderError
from parley.events import Done, Event, TextDelta, UsageEvent
from parley.identity import Caller
from parley.interceptors.builtins.usage_limits import (
    UsageLimiter,
    UsageLimitExceeded,
    estimate_input_tokens,
)
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    ModelResponse,
    Services,
    TurnInfo,
)
from parley.messages import Message, TextPart, Usage, text_message
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.settings import Settings
from parley.settings.interceptors import UsageLimitSettings
from parley.store.database import Database
from parley.store.usage import UsageStore, period_end, periods

pytestmark = pytest.mark.anyio

ALICE = Caller("alice-owner", "key_alice", "alice")
BOB = Caller("bob-owner", "key_bob", "bob")
CAROL = Caller("carol-owner", "key_carol", "carol")
NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
DAY = 86_400.0


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(database: Database) -> UsageStore:
    return UsageStore(database)


async def limiter_for(
    database: Any,
    limits: dict[str, Any],
    *,
    clock: Clock | None = None,
    pricing: PriceCatalog | None = None,
) -> UsageLimiter:
    """A started limiter with ``limits`` (``interceptors.usage_limits`` as in a file)."""
    settings = UsageLimitSettings.model_validate({"enabled": True, **limits})
    limiter = UsageLimiter(settings, clock=clock or Clock())
    await limiter.startup(Services(Settings(), pricing or PriceCatalog(base={}), database))
    return limiter


def ask(
    chars: int = 400, *, max_tokens: int | None = 100, model: str = "mock-model"
) -> ModelRequest:
    """A one-message request of ``chars`` characters: ``chars // 4 + 4`` tokens in."""
    return ModelRequest(model, (text_message("user", "x" * chars),), max_tokens=max_tokens)


def call_by(caller: Caller, model: str = "mock-model") -> CallInfo:
    return CallInfo("model", "fast", TurnInfo(caller=caller), upstream_model=model)


def reply(usage: Usage | None, cost: float | None = None) -> ModelResponse:
    return ModelResponse("hi", "", (), "end_turn", usage, cost, 0.1, 0.05)


async def run(limiter: UsageLimiter, caller: Caller, request: ModelRequest) -> CallInfo:
    """``before_request`` for a new call; the call, reserved, for settling later."""
    call = call_by(caller, request.model)
    await limiter.before_request(request, call)
    return call


async def used(store: UsageStore, key_id: str = "key_alice", at: float = NOON) -> tuple[Any, ...]:
    return await store.totals(key_id, *periods(at))


def in_flight(limiter: UsageLimiter) -> int:
    return int(limiter.describe()["calls_in_flight"])


# --- the store ------------------------------------------------------------------------


async def test_store_adds_to_the_day_and_the_month_rows_creating_them(store: UsageStore) -> None:
    assert await used(store) == (0, 0.0, 0, 0.0)
    await store.add("key_alice", "2026-12-01", "2026-12", 100, 0.5)
    await store.add("key_alice", "2026-12-01", "2026-12", 20, 0.25)
    await store.add("key_alice", "2026-12-02", "2026-12", 7, 0.0)
    await store.add("key_bob", "2026-12-01", "2026-12", 1000, 9.0)
    assert await store.totals("key_alice", "2026-12-01", "2026-12") == (120, 0.75, 127, 0.75)
    assert await store.totals("key_alice", "2026-12-02", "2026-12") == (7, 0.0, 127, 0.75)
    day, month = await store.report("key_alice", "2026-12-01", "2026-12")
    assert (day.period, day.calls, month.period, month.calls) == ("2026-12-01", 2, "2026-12", 3)
    nothing, _ = await store.report("key_carol", "2026-12-01", "2026-12")
    assert (nothing.tokens, nothing.cost_usd, nothing.calls) == (0, 0.0, 0)


def test_periods_are_utc_days_and_months_and_end_at_the_next_midnight() -> None:
    late = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert periods(late) == ("2026-12-31", "2026-12")
    assert period_end("2026-12-31") == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_end("2026-12") == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_end("2026-02") == datetime(2026, 3, 1, tzinfo=UTC)
    assert period_end("2028-02-28") == datetime(2028, 2, 29, tzinfo=UTC)


def test_the_input_estimate_counts_text_and_messages() -> None:
    request = ModelRequest(
        "m",
        (
            text_message("system", "s" * 40),
            Message("user", (TextPart("u" * 360), TextPart("v" * 400))),
        ),
    )
    assert estimate_input_tokens(request) == 800 // 4 + 2 * 4
    assert estimate_input_tokens(ask(400)) == 104


# --- reservations ---------------------------------------------------------------------


async def test_concurrent_calls_cannot_all_slip_under_the_limit(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(database, {"default": {"tokens_per_day": 1000}})
    request = ask(1200, max_tokens=100)  # 304 in + 100 out = 404 each: two fit in 1,000
    calls = [call_by(ALICE) for _ in range(6)]
    outcomes = await asyncio.gather(
        *(limiter.before_request(request, call) for call in calls), return_exceptions=True
    )
    admitted = [call for call, outcome in zip(calls, outcomes, strict=True) if outcome is None]
    refused = [outcome for outcome in outcomes if isinstance(outcome, UsageLimitExceeded)]
    assert (len(admitted), len(refused)) == (2, 4)
    assert "808 more held by calls in progress" in refused[0].message
    assert in_flight(limiter) == 2
    for call in admitted:  # the real replies were small: the room comes back
        await limiter.after_response(reply(Usage(100, 20)), call)
    assert in_flight(limiter) == 0
    assert await used(store) == (240, 0.0, 240, 0.0)
    await run(limiter, ALICE, request)  # 240 + 404
    with pytest.raises(UsageLimitExceeded, match="used 240 and 404 more held"):
        await run(limiter, ALICE, request)


async def test_a_settled_call_counts_its_real_usage_and_releases_its_reservation(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(database, {"default": {"tokens_per_day": 10_000}})
    call = await run(limiter, ALICE, ask(400, max_tokens=5000))
    assert call.data[limiter].tokens == 104 + 1024  # reserve_output_tokens caps the reply
    await limiter.after_response(reply(Usage(90, 30), 0.002), call)
    assert call.data == {}
    assert in_flight(limiter) == 0
    assert await used(store) == (120, 0.002, 120, 0.002)
    day, month = await store.report("key_alice", *periods(NOON))
    assert (day.calls, month.calls) == (1, 1)
    # an after-hook failing later reports an error for a call already settled: no change
    await limiter.on_error(ProviderError("late", provider="mock"), call)
    assert await used(store) == (120, 0.002, 120, 0.002)


async def test_a_reply_without_usage_is_counted_at_the_estimate(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(database, {"default": {"tokens_per_month": 10_000}})
    call = await run(limiter, ALICE, ask(400, max_tokens=None))
    await limiter.after_response(reply(None), call)
    reserve = UsageLimitSettings().reserve_output_tokens
    assert await used(store) == (104 + reserve, 0.0, 104 + reserve, 0.0)


async def test_a_failed_call_is_released_without_charge(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(database, {"default": {"tokens_per_day": 500}})
    call = await run(limiter, ALICE, ask(400, max_tokens=300))  # 404 of 500
    with pytest.raises(UsageLimitExceeded):
        await run(limiter, ALICE, ask(400, max_tokens=300))
    await limiter.on_error(ProviderError("upstream down", provider="mock"), call)
    assert in_flight(limiter) == 0
    assert await used(store) == (0, 0.0, 0, 0.0)
    await run(limiter, ALICE, ask(400, max_tokens=300))  # the room is back


async def test_a_stream_abandoned_through_the_chain_settles_the_prompt_estimate(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(database, {"default": {"tokens_per_day": 10_000}})
    chain = InterceptorChain([limiter])

    async def upstream(request: ModelRequest) -> AsyncGenerator[Event]:
        yield TextDelta("partial ")
        await asyncio.sleep(3600)
        yield Done("end_turn")

    stream = chain.stream(call_by(ALICE), ask(800, max_tokens=1000), upstream)
    assert await anext(stream) == TextDelta("partial ")
    assert in_flight(limiter) == 1
    await stream.aclose()  # the client went away
    assert in_flight(limiter) == 0
    assert await used(store) == (204, 0.0, 204, 0.0)


async def test_a_whole_call_through_the_chain_counts_the_upstream_usage(
    database: Database, store: UsageStore
) -> None:
    pricing = PriceCatalog(Settings(pricing={"mock-model": {"input": 1.0, "output": 2.0}}).pricing)
    limiter = await limiter_for(database, {"default": {"cost_per_day_usd": 1.0}}, pricing=pricing)
    chain = InterceptorChain([limiter], pricing=pricing)

    async def upstream(request: ModelRequest) -> AsyncGenerator[Event]:
        yield TextDelta("hello")
        yield UsageEvent(Usage(1000, 500))
        yield Done("end_turn")

    events = [event async for event in chain.stream(call_by(ALICE), ask(), upstream)]
    assert events == [TextDelta("hello"), UsageEvent(Usage(1000, 500)), Done("end_turn")]
    tokens, cost, _, _ = await used(store)
    assert tokens == 1500
    assert cost == pytest.approx(1000 * 1e-6 + 500 * 2e-6)


# --- which limit ----------------------------------------------------------------------


async def test_day_and_month_limits_each_hold_and_reset(
    database: Database, store: UsageStore
) -> None:
    clock = Clock(datetime(2026, 12, 30, 12, 0, tzinfo=UTC).timestamp())
    limiter = await limiter_for(
        database, {"default": {"tokens_per_day": 500, "tokens_per_month": 800}}, clock=clock
    )
    request = ask(0, max_tokens=96)  # 4 + 96 = 100 tokens
    await limiter.after_response(reply(Usage(400, 50)), await run(limiter, ALICE, request))
    with pytest.raises(UsageLimitExceeded, match="500 tokens per day") as day_refusal:
        await run(limiter, ALICE, request)
    assert day_refusal.value.retry_after == 12 * 3600
    assert "resets at 2026-12-31 00:00 UTC" in day_refusal.value.message

    clock.now += DAY  # the 31st: a new day, the same month
    await limiter.after_response(reply(Usage(250, 50)), await run(limiter, ALICE, request))
    assert await used(store, at=clock.now) == (300, 0.0, 750, 0.0)
    with pytest.raises(UsageLimitExceeded, match="800 tokens per month") as month_refusal:
        await run(limiter, ALICE, request)
    assert month_refusal.value.retry_after == 12 * 3600
    assert "resets at 2027-01-01 00:00 UTC" in month_refusal.value.message

    clock.now += DAY  # January
    await run(limiter, ALICE, request)


async def test_when_day_and_month_are_both_spent_the_month_is_reported(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(
        database, {"default": {"tokens_per_day": 100, "tokens_per_month": 100}}
    )
    await store.add("key_alice", *periods(NOON), 100, 0.0)
    with pytest.raises(UsageLimitExceeded, match="per month") as refusal:
        await run(limiter, ALICE, ask(0, max_tokens=1))
    assert refusal.value.retry_after == period_end("2026-12").timestamp() - NOON


async def test_a_key_entry_by_id_or_by_name_overrides_the_default(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(
        database,
        {
            "default": {"tokens_per_day": 200},
            "keys": {
                "key_alice": {"tokens_per_day": 100_000},
                "alice": {"tokens_per_day": 1},  # the id's entry wins over the name's
                "bob": {"tokens_per_day": 50},
            },
        },
    )
    big = ask(4000, max_tokens=100)  # 1,104 tokens
    small = ask(400, max_tokens=0)  # 104 tokens
    await run(limiter, ALICE, big)
    with pytest.raises(UsageLimitExceeded, match="key 'bob': 50 tokens per day") as too_big:
        await run(limiter, BOB, small)
    assert too_big.value.message == (
        "This request is larger than the usage limit of key 'bob': 50 tokens per day, and it "
        "needs about 104 on its own (lower max_tokens or shorten the conversation)."
    )
    await run(limiter, CAROL, small)
    with pytest.raises(UsageLimitExceeded, match="key 'carol': 200 tokens per day"):
        await run(limiter, CAROL, small)


class UntouchableDatabase:
    """Fails the test if anything reads or writes."""

    async def read(self, query: Any) -> Any:
        raise AssertionError("an unlimited key read the database")

    async def write(self, transaction: Any) -> Any:
        raise AssertionError("an unlimited key wrote the database")


async def test_unlimited_keys_never_touch_the_database() -> None:
    limits = {"keys": {"bob": {"tokens_per_day": 10}, "carol": {}}}
    limiter = await limiter_for(UntouchableDatabase(), limits)
    for caller in (ALICE, CAROL):  # no default limit; carol's entry sets nothing
        call = await run(limiter, caller, ask(100_000, max_tokens=None))
        assert call.data == {}
        await limiter.after_response(reply(Usage(10**6, 10**6), 99.0), call)
        await limiter.on_error(CallCancelled("gone"), call)
    with pytest.raises(AssertionError, match="read the database"):  # bob has a limit
        await run(limiter, BOB, ask())


# --- the refusal ----------------------------------------------------------------------


async def test_the_refusal_is_a_clear_429_with_retry_after(
    database: Database, store: UsageStore
) -> None:
    clock = Clock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp())
    limiter = await limiter_for(database, {"default": {"tokens_per_day": 100_000}}, clock=clock)
    await store.add("key_alice", "2026-12-01", "2026-12", 99_500, 0.0)
    with pytest.raises(UsageLimitExceeded) as refusal:
        await run(limiter, ALICE, ask(784, max_tokens=1000))  # 200 in + 1,000 out
    error = refusal.value
    assert error.message == (
        "Usage limit reached for key 'alice': 100,000 tokens per day "
        "(used 99,500, this request needs about 1,200). It resets at 2026-12-02 00:00 UTC."
    )
    assert (error.status, error.type, error.code) == (
        429,
        "rate_limit_error",
        "usage_limit_exceeded",
    )
    assert error.retry_after == 14 * 3600
    response = error_response(error)
    assert response.status_code == 429
    assert response.headers["retry-after"] == str(14 * 3600)
    assert in_flight(limiter) == 0
    # nothing is held for a refused call: exactly what is left still fits
    key_without_name = Caller("o", "key_alice", None)
    with pytest.raises(UsageLimitExceeded, match="key 'key_alice'"):
        await run(limiter, key_without_name, ask(784, max_tokens=1000))
    await run(limiter, ALICE, ask(0, max_tokens=496))


async def test_cost_limits_price_the_estimate_and_settle_the_real_cost(
    database: Database, store: UsageStore
) -> None:
    settings = Settings(pricing={"priced-model": {"input": 1.0, "output": 2.0}})
    limiter = await limiter_for(
        database, {"default": {"cost_per_day_usd": 0.01}}, pricing=PriceCatalog(settings.pricing)
    )
    request = ask(3984, max_tokens=1000, model="priced-model")  # $0.001 in + $0.002 out
    calls = [await run(limiter, ALICE, request) for _ in range(3)]
    with pytest.raises(UsageLimitExceeded) as refusal:
        await run(limiter, ALICE, request)
    assert "$0.01 per day" in refusal.value.message
    assert "this request needs about $0.0030" in refusal.value.message
    await limiter.after_response(reply(Usage(1000, 500)), calls[0])  # no cost: priced here
    await limiter.after_response(reply(Usage(1000, 500), 0.0032), calls[1])  # as reported
    calls[2].opened = True  # the upstream was asked, then the client left
    await limiter.on_error(CallCancelled("gone"), calls[2])  # the prompt only
    tokens, cost, _, month_cost = await used(store)
    assert tokens == 1500 + 1500 + 1000
    assert cost == month_cost == pytest.approx(0.002 + 0.0032 + 0.001)
    await run(limiter, ALICE, request)  # 0.0062 + 0.003 fits in 0.01
    with pytest.raises(UsageLimitExceeded, match=r"used \$0.0062 and \$0.0030 more held"):
        await run(limiter, ALICE, request)


async def test_an_unpriced_model_costs_nothing_and_is_reported_once(
    database: Database, store: UsageStore, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await limiter_for(database, {"default": {"cost_per_day_usd": 0.000001}})
    with caplog.at_level(logging.WARNING, logger="parley.interceptors.builtins.usage_limits"):
        for _ in range(3):
            call = await run(limiter, ALICE, ask(model="home-made-model"))
            await limiter.after_response(reply(Usage(5000, 5000)), call)
    warnings = [r.getMessage() for r in caplog.records if "home-made-model" in r.getMessage()]
    assert len(warnings) == 1
    assert "cost limits cannot see" in warnings[0]
    assert await used(store) == (30_000, 0.0, 30_000, 0.0)


async def test_describe_names_the_default_and_counts_key_entries(database: Database) -> None:
    limiter = await limiter_for(
        database,
        {"default": {"tokens_per_day": 5}, "keys": {"a": {}, "b": {"cost_per_month_usd": 1}}},
    )
    facts = limiter.describe()
    assert facts["default"]["tokens_per_day"] == 5
    assert facts["default"]["cost_per_day_usd"] is None
    assert (facts["keys"], facts["calls_in_flight"]) == (2, 0)
    assert (limiter.name, limiter.order) == ("usage_limits", 50)


class SlowReads:
    """The real database, but a read's answer is held back until ``gate`` opens."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self.gate = asyncio.Event()
        self.gate.set()
        self.read_done = asyncio.Event()

    async def read(self, query: Any) -> Any:
        result = await self._db.read(query)
        self.read_done.set()
        await self.gate.wait()
        return result

    async def write(self, transaction: Any) -> Any:
        return await self._db.write(transaction)


async def test_a_call_settling_during_a_check_is_seen_either_held_or_counted(
    database: Database, store: UsageStore
) -> None:
    slow = SlowReads(database)
    limiter = await limiter_for(slow, {"default": {"tokens_per_day": 1000}})
    request = ask(0, max_tokens=596)  # 600 tokens
    first = await run(limiter, ALICE, request)
    slow.gate.clear()
    slow.read_done.clear()
    second = asyncio.create_task(run(limiter, ALICE, request))
    await slow.read_done.wait()  # the second call has read the totals: 0 settled so far
    settling = asyncio.create_task(limiter.after_response(reply(Usage(500, 100)), first))
    await asyncio.sleep(0.05)
    assert in_flight(limiter) == 1  # the settle waits for the check to finish
    slow.gate.set()
    with pytest.raises(UsageLimitExceeded, match="used 0 and 600 more held"):
        await second
    await settling
    assert in_flight(limiter) == 0
    assert await used(store) == (600, 0.0, 600, 0.0)


async def test_errors_charge_what_the_upstream_reported_and_only_what_it_was_asked(
    database: Database, store: UsageStore
) -> None:
    limiter = await limiter_for(database, {"default": {"tokens_per_day": 100_000}})
    # an interceptor refused the reply after the upstream reported its usage
    refused = await run(limiter, ALICE, ask(400))
    refused.opened, refused.usage = True, Usage(300, 40)
    await limiter.on_error(InvalidRequest("reply refused"), refused)
    assert await used(store) == (340, 0.0, 340, 0.0)
    # cancelled before the upstream was asked (a slow hook, say): nothing is charged
    early = await run(limiter, ALICE, ask(400))
    await limiter.on_error(CallCancelled("gone"), early)
    assert await used(store) == (340, 0.0, 340, 0.0)
    assert in_flight(limiter) == 0
