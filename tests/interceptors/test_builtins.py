"""The smaller built-ins on their own: metadata injection, the audit rows of failed and
abandoned calls, and what the logging interceptor writes."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from parley.errors import ProviderError
from parley.events import Done, Event, TextDelta, UsageEvent
from parley.identity import Caller
from parley.interceptors.builtins.audit import AuditInterceptor
from parley.interceptors.builtins.call_log import CallLogger
from parley.interceptors.builtins.metadata import MetadataInjector
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallInfo, Services, TurnInfo
from parley.messages import TextPart, Usage, text_message
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.settings import Settings
from parley.settings.interceptors import (
    AuditSettings,
    LoggingInterceptorSettings,
    MetadataSettings,
)
from parley.store.audit import AuditLog, request_hash

pytestmark = pytest.mark.anyio

TURN = TurnInfo(Caller("alice", "key_a", "laptop"), "chatchat", "conv_1", "msg_1")


def model_call(purpose: str = "chat") -> CallInfo:
    return CallInfo("model", "fast", TURN, purpose=purpose, provider="p", upstream_model="m")  # type: ignore[arg-type]


async def test_metadata_joins_the_first_system_message() -> None:
    injector = MetadataInjector(MetadataSettings(enabled=True, fields={"team": "blue"}))
    request = ModelRequest("m", (text_message("system", "Be brief."), text_message("user", "hi")))
    changed = await injector.before_request(request, model_call())
    assert changed is not None
    system, user = changed.messages
    assert system.parts[0] == TextPart("Be brief.")
    block = system.parts[1].text  # type: ignore[union-attr]
    assert block.startswith("\n\n<request_metadata>")
    for line in ("caller: alice", "api key: laptop", "source: chatchat", "team: blue"):
        assert line in block
    assert user == request.messages[1]


async def test_metadata_adds_a_system_message_and_respects_its_settings() -> None:
    injector = MetadataInjector(
        MetadataSettings(enabled=True, include_identity=False, include_source=False)
    )
    request = ModelRequest("m", (text_message("user", "hi"),))
    changed = await injector.before_request(request, model_call())
    assert changed is not None
    assert [m.role for m in changed.messages] == ["system", "user"]
    assert "alice" not in changed.messages[0].parts[0].text  # type: ignore[union-attr]
    assert await injector.before_request(request, model_call("title")) is None


async def test_failed_and_abandoned_calls_get_rows(audit: AuditLog, tmp_path: Path) -> None:
    interceptor = AuditInterceptor(AuditSettings())
    await interceptor.startup(Services(Settings(data_dir=tmp_path), PriceCatalog({}), None, audit))
    chain = InterceptorChain([interceptor])
    request = ModelRequest("m", (text_message("user", "hi"),))

    async def failing(request: ModelRequest) -> AsyncGenerator[Event]:
        raise ProviderError("down", provider="p", upstream_status=503)
        yield Done("end_turn")  # pragma: no cover

    async def slow(request: ModelRequest) -> AsyncGenerator[Event]:
        yield TextDelta("a")
        yield UsageEvent(Usage(1, 1))
        yield Done("end_turn")

    with pytest.raises(ProviderError):
        async for _ in chain.stream(model_call(), request, failing):
            pass
    stream = chain.stream(model_call(), request, slow)
    await anext(stream)
    await stream.aclose()
    rows = await audit.query(owner="alice")
    assert [(r["outcome"], r["error_code"]) for r in rows] == [
        ("cancelled", None),
        ("error", "upstream_error"),
    ]
    assert rows[0]["request_hash"] == request_hash(request)
    assert (rows[0]["key_id"], rows[0]["source"], rows[0]["conversation_id"]) == (
        "key_a",
        "chatchat",
        "conv_1",
    )


async def test_rows_queued_while_the_database_fails_are_kept(
    audit: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from parley.store.audit import AuditRecord

    audit.add(AuditRecord("alice", "key_a", "tool", "echo", "ok"))

    async def broken(transaction: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(audit._db, "write", broken)
    with pytest.raises(OSError, match="disk full"):
        await audit.flush()
    assert audit.pending == 1
    monkeypatch.undo()
    assert await audit.flush() == 1
    assert audit.pending == 0


async def test_logging_never_shows_content_unless_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "parley.calls")
    request = ModelRequest("m", (text_message("user", "the private question"),))

    async def reply(request: ModelRequest) -> AsyncGenerator[Event]:
        yield TextDelta("the private answer")
        yield Done("end_turn")

    for include in (False, True):
        chain = InterceptorChain([CallLogger(LoggingInterceptorSettings(include_content=include))])
        async for _ in chain.stream(model_call(), request, reply):
            pass
        shown = "private" in caplog.text
        assert shown is include
        assert "finished: stop" in caplog.text
        caplog.clear()


async def test_a_row_the_database_refuses_never_blocks_the_log(audit: AuditLog) -> None:
    from parley.store.audit import AuditRecord

    audit.add(AuditRecord("alice", "key_a", "tool", "x" * 1000, "ok"))
    audit.add(AuditRecord("alice", "key_a", "tool", "bad", "ok", detail={"x": {1, 2}}))
    audit.add(AuditRecord("alice", "key_a", "tool", "after", "ok"))
    assert await audit.flush() == 3
    assert audit.pending == 0
    rows = await audit.query(owner="alice")
    assert [r["name"] for r in rows] == ["after", "x" * 256]  # cut to its column


def _nested(levels: int, leaf: object = 1) -> dict[str, object]:
    value: object = leaf
    for _ in range(levels):
        value = {"a": value}
    assert isinstance(value, dict)
    return value


class _Unprintable:
    def __str__(self) -> str:
        raise ValueError("no text for this")

    __repr__ = __str__


def test_a_request_too_deep_for_json_is_hashed_all_the_same() -> None:
    """orjson writes 254 levels and ``repr`` fails at about 1,000 (RecursionError): the
    hash of such a request is read without recursion, and tells requests apart."""
    for levels in (300, 5_000):
        assert request_hash(_nested(levels)) == request_hash(_nested(levels))
        assert request_hash(_nested(levels)) != request_hash(_nested(levels, leaf=2))
    assert request_hash(_nested(300)) != request_hash(_nested(301))
    assert request_hash({"x": _Unprintable()}) == request_hash({"x": _Unprintable()})


async def test_a_row_that_cannot_be_hashed_never_blocks_the_log(
    audit: AuditLog, caplog: pytest.LogCaptureFixture
) -> None:
    """A request nested 1,000 levels made its row's hash raise, and the whole batch was
    put back and retried every second: nobody's audit rows were written after it."""
    from parley.store.audit import AuditRecord

    audit.add(AuditRecord("alice", "key_a", "model", "deep", "error", hash_of=_nested(5_000)))
    audit.add(AuditRecord("alice", "key_a", "model", "odd", "error", hash_of=_Unprintable()))
    audit.add(AuditRecord("alice", "key_a", "tool", "after", "ok"))
    assert await audit.flush() == 3
    assert audit.pending == 0
    rows = await audit.query(owner="alice")
    assert {r["name"] for r in rows} >= {"deep", "after"}
    assert next(r for r in rows if r["name"] == "deep")["request_hash"]


async def test_a_backlog_is_hashed_as_it_grows(audit: AuditLog) -> None:
    from parley.store.audit import EAGER_HASH_BACKLOG, AuditRecord

    request = ModelRequest("m", (text_message("user", "hi"),))
    for _ in range(EAGER_HASH_BACKLOG + 1):
        audit.add(AuditRecord("alice", "key_a", "model", "fast", "stop", hash_of=request))
    queued = list(audit._pending)
    assert queued[0].hash_of is request
    assert queued[-1].hash_of is None
    assert queued[-1].request_hash == request_hash(request)
    await audit.flush()
    hashes = {r["request_hash"] for r in await audit.query(owner="alice", limit=2000)}
    assert hashes == {request_hash(request)}
