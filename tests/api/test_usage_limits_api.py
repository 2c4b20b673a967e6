"""Usage limits end to end: the official client against a real Parley server with the
usage_limits interceptor on, counting the mock upstream's reported usage, and
``GET /v1/usage``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

HELLO: Any = [{"role": "user", "content": "Hello there"}]
DAY_TOKENS = 500
CALL_TOKENS = 102
"""What the mock reports for each reply below: 100 prompt tokens, 2 completion tokens."""


def queue_reply(upstream: MockOpenAI) -> None:
    upstream.queue_text("Hi", "!", prompt_tokens=100)


@pytest.fixture(scope="module")
def limited(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        interceptors={
            "usage_limits": {
                "enabled": True,
                "default": {"tokens_per_day": DAY_TOKENS},
                "reserve_output_tokens": 10,
            }
        },
    )
    with ParleyServer(tmp_path_factory.mktemp("limited"), config) as server:
        yield server


@pytest.fixture(scope="module")
def keyed_limits(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        interceptors={
            "usage_limits": {
                "enabled": True,
                "default": {"tokens_per_day": 50},
                "keys": {"alice": {"tokens_per_day": 100_000, "cost_per_month_usd": 5.0}},
            }
        },
        pricing={"mock-model": {"input": 1.0, "output": 2.0}},
    )
    with ParleyServer(tmp_path_factory.mktemp("keyed-usage"), config) as server:
        yield server


def usage(server: ParleyServer, key: str = "sk-any", **params: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}/v1/usage", params=params, headers={"authorization": f"Bearer {key}"}
    )


def ask_until_refused(
    client: openai.OpenAI, upstream: MockOpenAI
) -> tuple[int, openai.RateLimitError]:
    """Ask until refused: how many calls were answered, and the refusal."""
    for answered in range(20):
        queue_reply(upstream)
        try:
            reply = client.chat.completions.create(model="fast", messages=HELLO, max_tokens=10)
        except openai.RateLimitError as error:
            return answered, error
        assert reply.choices[0].message.content == "Hi!"
    raise AssertionError("the limit was never reached")


def test_calls_run_until_the_day_limit_then_a_clear_rate_limit_error(
    limited: ParleyServer, upstream: MockOpenAI
) -> None:
    client = openai.OpenAI(base_url=f"{limited.url}/v1", api_key="sk-any", max_retries=0)
    answered, error = ask_until_refused(client, upstream)
    # 4 x 102 + a small estimate fits in 500; after the fifth, 510 is past it
    assert answered == 5
    assert len(upstream.requests) == 5  # the refused call never reached the upstream
    assert error.status_code == 429
    assert error.code == "usage_limit_exceeded"
    body: Any = error.body
    assert body["type"] == "rate_limit_error"
    assert re.fullmatch(
        r"Usage limit reached for key 'local': 500 tokens per day \(used 510, this request "
        r"needs about \d+\)\. It resets at \d{4}-\d\d-\d\d 00:00 UTC\.",
        body["message"],
    ), body["message"]
    assert 0 < int(error.response.headers["retry-after"]) <= 86_400

    with pytest.raises(openai.RateLimitError, match="Usage limit reached"):  # streaming too
        client.chat.completions.create(model="fast", messages=HELLO, max_tokens=10, stream=True)

    shown = usage(limited)
    assert shown.status_code == 200
    report = shown.json()
    assert (report["key_id"], report["key_name"], report["limits_enabled"]) == (
        "local",
        None,
        True,
    )
    day, month = report["day"], report["month"]
    assert (day["tokens"], day["calls"], day["limit_tokens"]) == (5 * CALL_TOKENS, 5, DAY_TOKENS)
    assert (month["tokens"], month["calls"], month["limit_tokens"]) == (5 * CALL_TOKENS, 5, None)
    assert day["cost_usd"] == 0.0  # mock-model has no price here
    assert day["limit_cost_usd"] is None
    assert month["period"] == day["period"][:7]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT00:00:00Z", day["resets_at"])
    assert month["resets_at"].endswith("-01T00:00:00Z")


def test_usage_per_key_with_admins_seeing_any_key(
    keyed_limits: ParleyServer, upstream: MockOpenAI
) -> None:
    keyed = keyed_limits
    alice_key = keyed.create_key("alice")
    bob_key = keyed.create_key("bob")
    ops_key = keyed.create_key("ops", "--admin")
    url = f"{keyed.url}/v1"
    alice = openai.OpenAI(base_url=url, api_key=alice_key, max_retries=0)
    bob = openai.OpenAI(base_url=url, api_key=bob_key, max_retries=0)

    queue_reply(upstream)
    alice.chat.completions.create(model="fast", messages=HELLO, max_tokens=10)
    with pytest.raises(openai.RateLimitError, match="key 'bob': 50 tokens per day"):
        bob.chat.completions.create(model="fast", messages=HELLO, max_tokens=100)

    own = usage(keyed, alice_key).json()
    alice_id = own["key_id"]
    assert alice_id.startswith("key")
    assert own["key_name"] == "alice"
    assert (own["day"]["tokens"], own["day"]["limit_tokens"]) == (CALL_TOKENS, 100_000)
    assert own["month"]["limit_cost_usd"] == 5.0
    assert own["month"]["cost_usd"] == pytest.approx((100 * 1.0 + 2 * 2.0) / 1_000_000)

    refused = usage(keyed, bob_key, key_id=alice_id)
    assert refused.status_code == 403
    assert refused.json()["error"]["param"] == "key_id"
    bobs = usage(keyed, bob_key).json()
    assert (bobs["key_name"], bobs["day"]["tokens"], bobs["day"]["limit_tokens"]) == ("bob", 0, 50)

    seen = usage(keyed, ops_key, key_id=alice_id)
    assert seen.status_code == 200
    assert seen.json()["key_name"] == "alice"
    assert seen.json()["day"] == own["day"]
    assert usage(keyed, ops_key, key_id="key_nobody").status_code == 404
    assert usage(keyed, "sk-parley-wrong").status_code == 401


def test_usage_shows_no_limits_when_the_interceptor_is_off(parley: ParleyServer) -> None:
    shown = usage(parley)
    assert shown.status_code == 200
    report = shown.json()
    assert report["limits_enabled"] is False
    assert report["key_id"] == "local"
    for period in (report["day"], report["month"]):
        assert (period["limit_tokens"], period["limit_cost_usd"]) == (None, None)
        assert period["tokens"] == 0  # nothing is counted while the interceptor is off
