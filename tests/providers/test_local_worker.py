"""The local model's worker under supervision, with a scripted backend (no native code).

A worker that aborts, segfaults, hangs, raises or writes junk costs only its own
request; the next request gets a working worker. See ``tests/support/local_backends.py``
for what each prompt and model-file name makes the scripted model do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.errors import ProviderError
from parley.events import Done, Event, TextDelta, UsageEvent
from parley.messages import ToolSpec, text_message
from parley.providers.local.protocol import Generate, Load, Ready, decode_reply, encode
from parley.providers.local.provider import TOOLS_NOTE, LocalProvider
from parley.providers.protocol import ModelRequest
from parley.providers.registry import LOCAL_MODEL_NAME
from parley.settings import ProviderSettings

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
BACKEND = "tests.support.local_backends:load"


@pytest.fixture(autouse=True)
def _importable_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker imports the scripted backend from this checkout."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _model_file(tmp_path: Path, name: str = "scripted.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(b"scripted")
    return path


def _provider(path: Path, **overrides: Any) -> LocalProvider:
    values: dict[str, Any] = {
        "name": "local",
        "kind": "local",
        "model_path": str(path),
        "backend": BACKEND,
        "cancel_grace_seconds": 1.0,
        "load_timeout_seconds": 20.0,
    }
    values.update(overrides)
    return LocalProvider(ProviderSettings(**values))


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[LocalProvider]:
    local = _provider(_model_file(tmp_path))
    try:
        yield local
    finally:
        await local.aclose()


def _request(text: str, **fields: Any) -> ModelRequest:
    return ModelRequest(model=LOCAL_MODEL_NAME, messages=(text_message("user", text),), **fields)


async def _collect(provider: LocalProvider, request: ModelRequest) -> list[Event]:
    with anyio.fail_after(30):
        return [event async for event in provider.stream(request)]


async def _failure(provider: LocalProvider, request: ModelRequest) -> tuple[str, ProviderError]:
    """The text streamed before the failure, and the failure."""
    pieces: list[str] = []

    async def drain() -> None:
        async for event in provider.stream(request):
            if isinstance(event, TextDelta):
                pieces.append(event.text)

    with anyio.fail_after(30), pytest.raises(ProviderError) as caught:
        await drain()
    return "".join(pieces), caught.value


def _text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def _wait_gone(pid: int) -> None:
    """Until ``pid`` no longer exists (the supervisor reaps its workers)."""
    with anyio.fail_after(5):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await anyio.sleep(0.02)


# --- a working worker ------------------------------------------------------------------


async def test_streams_pieces_then_usage_then_done(provider: LocalProvider) -> None:
    events = await _collect(provider, _request("count", max_tokens=5))

    assert _text(events) == "word0 word1 word2 word3 word4 "
    usage = events[-2]
    assert isinstance(usage, UsageEvent)
    assert usage.usage.output_tokens == 5
    assert events[-1] == Done("max_tokens")
    assert provider.worker.stats.started == 1


async def test_the_worker_gets_plain_messages_the_tools_note_and_sampling(
    provider: LocalProvider,
) -> None:
    tool = ToolSpec("get_weather", "Weather for a city", {"type": "object", "properties": {}})
    request = ModelRequest(
        model=LOCAL_MODEL_NAME,
        messages=(text_message("system", "You are terse."), text_message("user", "echo")),
        tools=(tool,),
        max_tokens=7,
        temperature=0.2,
        top_p=0.9,
        stop=("END",),
        options={"seed": 4, "logit_bias": {"1": 2}},
    )
    sent = json.loads(_text(await _collect(provider, request)))

    assert sent["messages"] == [
        {"role": "system", "content": f"You are terse.\n\n{TOOLS_NOTE}"},
        {"role": "user", "content": "echo"},
    ]
    assert sent["options"] == {"temperature": 0.2, "top_p": 0.9, "stop": ["END"], "seed": 4}
    assert sent["max_tokens"] == 7


async def test_one_worker_serves_one_generation_at_a_time(provider: LocalProvider) -> None:
    async def run(results: list[str]) -> None:
        results.append(_text(await _collect(provider, _request("count", max_tokens=30))))

    results: list[str] = []
    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(run, results)

    expected = "".join(f"word{i} " for i in range(30))
    assert results == [expected] * 3  # never interleaved
    assert provider.worker.stats.started == 1


async def test_junk_written_to_stdout_does_not_reach_the_protocol(provider: LocalProvider) -> None:
    assert _text(await _collect(provider, _request("stdout"))) == "ok"
    pid = provider.worker.pid
    assert _text(await _collect(provider, _request("count", max_tokens=2))) == "word0 word1 "
    assert provider.worker.pid == pid
    assert provider.worker.stats.crashes == 0


# --- crashes cost one request -----------------------------------------------------------


@pytest.mark.parametrize("how", ["abort", "segv"])
async def test_a_crash_mid_generation_costs_only_that_request(
    provider: LocalProvider, how: str
) -> None:
    await _collect(provider, _request("count", max_tokens=1))
    first_pid = provider.worker.pid
    assert first_pid is not None

    text, error = await _failure(provider, _request(how))

    assert text == "partial "  # what came before the crash was streamed
    assert error.status == 503
    assert error.code == "local_model_crashed"
    signal_name = "SIGABRT" if how == "abort" else "SIGSEGV"
    assert f"killed by {signal_name}" in error.message
    assert "parley doctor" in error.message
    assert provider.worker.stats.crashes == 1

    events = await _collect(provider, _request("count", max_tokens=3))
    assert _text(events) == "word0 word1 word2 "
    assert provider.worker.pid not in (None, first_pid)
    assert provider.worker.stats.started == 2


async def test_a_python_error_in_the_runtime_keeps_the_worker(provider: LocalProvider) -> None:
    await _collect(provider, _request("count", max_tokens=1))
    pid = provider.worker.pid

    _, error = await _failure(provider, _request("raise"))

    assert error.code == "local_generation_failed"
    assert error.status == 502
    assert "scripted failure" in error.message
    assert _text(await _collect(provider, _request("count", max_tokens=1))) == "word0 "
    assert provider.worker.pid == pid
    assert provider.worker.stats.crashes == 0


# --- cancelling and hanging ---------------------------------------------------------------


async def test_closing_the_stream_stops_the_generation_by_message(provider: LocalProvider) -> None:
    stream = provider.stream(_request("count", max_tokens=100_000))  # 1,000 s of words
    with anyio.fail_after(30):
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        await stream.aclose()  # type: ignore[attr-defined]
    pid = provider.worker.pid

    started = time.monotonic()
    events = await _collect(provider, _request("count", max_tokens=2))

    assert _text(events) == "word0 word1 "
    assert time.monotonic() - started < 5  # the worker stopped; it was not waited out
    stats = provider.worker.stats
    assert (stats.cancelled, stats.killed, stats.crashes) == (1, 0, 0)
    assert provider.worker.pid == pid  # stopped by a Cancel frame, not killed


async def test_cancelling_the_consumer_stops_the_generation(provider: LocalProvider) -> None:
    seen: list[Event] = []
    with anyio.CancelScope() as scope:
        async for event in provider.stream(_request("count", max_tokens=100_000)):
            seen.append(event)
            scope.cancel()
    assert scope.cancelled_caught
    assert isinstance(seen[0], TextDelta)

    events = await _collect(provider, _request("count", max_tokens=1))
    assert _text(events) == "word0 "
    assert (provider.worker.stats.cancelled, provider.worker.stats.killed) == (1, 0)


async def test_a_hung_worker_is_killed_when_its_consumer_gives_up(provider: LocalProvider) -> None:
    with anyio.move_on_after(1):
        async for _ in provider.stream(_request("hang")):
            pass
    pid = provider.worker.pid
    assert pid is not None

    # the cancel is not obeyed: after the 1 s grace the worker is killed
    events = await _collect(provider, _request("count", max_tokens=1))

    assert _text(events) == "word0 "
    assert provider.worker.stats.killed == 1
    assert provider.worker.stats.crashes == 0  # killed on purpose is not a crash
    assert provider.worker.pid != pid
    await _wait_gone(pid)


# --- loading ------------------------------------------------------------------------------


async def test_the_model_is_checked_before_it_is_ready(tmp_path: Path) -> None:
    provider = _provider(_model_file(tmp_path, "crash-on-check.gguf"))
    try:
        _, error = await _failure(provider, _request("count"))
    finally:
        await provider.aclose()

    assert error.code == "local_model_crashed"
    assert "killed by SIGABRT while loading" in error.message
    assert provider.worker.stats.ready is None


async def test_a_model_the_runtime_refuses_is_a_503_saying_why(tmp_path: Path) -> None:
    provider = _provider(_model_file(tmp_path, "refuse.gguf"))
    try:
        _, error = await _failure(provider, _request("count"))
    finally:
        await provider.aclose()

    assert error.status == 503
    assert error.code == "local_model_unavailable"
    assert "ValueError: not a model file: refuse.gguf" in error.message
    assert provider.worker.stats.crashes == 0


async def test_a_worker_that_does_not_load_in_time_is_killed(tmp_path: Path) -> None:
    provider = _provider(_model_file(tmp_path, "hang-on-load.gguf"), load_timeout_seconds=1.0)
    try:
        started = time.monotonic()
        _, error = await _failure(provider, _request("count"))
        elapsed = time.monotonic() - started
    finally:
        await provider.aclose()

    assert error.code == "local_model_unavailable"
    assert "did not load within 1 s" in error.message
    assert elapsed < 10
    assert provider.worker.stats.killed == 1


async def test_crashes_in_a_row_back_off_then_recover(tmp_path: Path) -> None:
    crashing = _model_file(tmp_path, "crash-on-load.gguf")
    settings = ProviderSettings(
        name="local", kind="local", model_path=str(crashing), backend=BACKEND
    )
    provider = LocalProvider(settings)
    now = [1000.0]
    provider.worker._clock = lambda: now[0]
    try:
        for _ in range(2):  # the first crash is retried at once, the second too
            _, error = await _failure(provider, _request("count"))
            assert error.code == "local_model_crashed"
        started = time.monotonic()
        now[0] += 0.5  # 0.5 s of the 1 s backoff left: this request waits it out
        with anyio.fail_after(10):
            _, error = await _failure(provider, _request("count"))
        assert time.monotonic() - started >= 0.4
        assert provider.worker.stats.started == 3

        # the third crash set 2 s of backoff: past it, a fourth crash sets 4 s, more
        # than a request waits: the next one is refused at once, with Retry-After
        now[0] += 2.0
        await _failure(provider, _request("count"))
        _, error = await _failure(provider, _request("count"))
        assert error.code == "local_model_crashed"
        assert "failed 4 times in a row; next try in 4 s" in error.message
        assert error.retry_after == pytest.approx(4.0)
        assert provider.worker.stats.started == 4

        settings.model_path = str(_model_file(tmp_path, "fixed.gguf"))
        now[0] += 4.0
        assert _text(await _collect(provider, _request("count", max_tokens=1))) == "word0 "
        assert provider.worker._failures.count == 0
    finally:
        await provider.aclose()


async def test_closing_stops_the_worker(provider: LocalProvider) -> None:
    await _collect(provider, _request("count", max_tokens=1))
    pid = provider.worker.pid
    assert pid is not None

    await provider.aclose()

    await _wait_gone(pid)
    assert provider.worker.stats.crashes == 0


# --- the worker process on its own ------------------------------------------------------------


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with subprocess.Popen(
        [sys.executable, "-m", "parley.providers.local.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        try:
            yield process
        finally:
            process.kill()


def test_the_worker_exits_when_its_input_closes(
    worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    assert worker.stdin is not None
    assert worker.stdout is not None
    worker.stdin.write(encode(Load(str(_model_file(tmp_path)), 512, 1, backend=BACKEND)))
    worker.stdin.flush()
    ready = decode_reply(worker.stdout.readline())
    assert isinstance(ready, Ready)
    assert ready.pid == worker.pid
    worker.stdin.write(encode(Generate(1, [{"role": "user", "content": "count"}], {}, 100_000)))
    worker.stdin.flush()
    assert worker.stdout.readline()  # generating

    worker.stdin.close()  # what the server's death looks like from here

    assert worker.wait(timeout=5) == 0


def test_the_worker_refuses_a_first_frame_that_is_not_load(
    worker: subprocess.Popen[bytes],
) -> None:
    assert worker.stdin is not None
    worker.stdin.write(b'{"kind": "nonsense"}\n')
    worker.stdin.close()

    assert worker.wait(timeout=10) == 2
    assert worker.stderr is not None
    assert b"unknown frame" in worker.stderr.read()
