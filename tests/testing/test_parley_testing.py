"""parley.testing as a user meets it: a fake model, the app in-process, the official client.

The first test is the README's "Testing with Parley" example, run as written there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from parley.app import create_app
from parley.messages import ToolCallPart
from parley.providers.protocol import ModelRequest
from parley.settings import Settings
from parley.testing import Call, FunctionProvider, LiveServer, MockOpenAI
from parley.tools.function import function_tool


def readme_example() -> str:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Testing with Parley", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readmes_example_passes(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)
    namespace["test_my_assistant"](tmp_path)  # its assertions hold, or this fails


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"Sunny in {city}, 24 C"


def answer(request: ModelRequest) -> list[Call] | str:
    """Calls the weather tool once, then answers with what it said."""
    results = [
        part.result.content
        for message in request.messages
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.result is not None
    ]
    if not results:
        return [Call("weather", {"city": "Paris"})]
    return f"The tool says: {results[0]}"


def test_a_server_tool_of_yours_runs_between_two_model_calls(tmp_path: Path) -> None:
    model = FunctionProvider(answer)
    settings = Settings(data_dir=tmp_path, tools={"default_tools": ["weather"]})
    app = create_app(settings, providers={"fake": model}, tools=[weather])
    with LiveServer(app, lifespan=True) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        stream = client.chat.completions.create(
            model="fake/any",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "The tool says: Sunny in Paris, 24 C"
    assert len(model.requests) == 2
    assert [spec.name for spec in model.requests[0].tools] == ["weather"]


def test_async_handlers_and_events_of_your_own(tmp_path: Path) -> None:
    from parley.events import Done, TextDelta, UsageEvent
    from parley.messages import Usage

    async def handler(request: ModelRequest) -> list[object]:
        return [TextDelta("cut "), TextDelta("short"), UsageEvent(Usage(3, 2)), Done("max_tokens")]

    model = FunctionProvider(handler)  # type: ignore[arg-type]
    app = create_app(Settings(data_dir=tmp_path), providers={"fake": model})
    with LiveServer(app, lifespan=True) as server:
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "fake/m", "messages": [{"role": "user", "content": "go"}]},
            timeout=30,
        ).json()
    assert reply["choices"][0]["message"]["content"] == "cut short"
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["prompt_tokens"] == 3


@pytest.mark.anyio
async def test_a_reply_mixing_calls_and_events_is_refused() -> None:
    from parley.events import TextDelta

    model = FunctionProvider(lambda request: [Call("weather"), TextDelta("x")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not calls and events"):
        async for _ in model.stream(ModelRequest(model="m", messages=())):
            pass


def test_the_mock_upstream_behind_a_configured_provider(tmp_path: Path) -> None:
    """MockOpenAI is a real upstream: Parley reaches it over HTTP like any provider."""
    with MockOpenAI() as upstream:
        upstream.queue_text("Hello", " over HTTP")
        settings = Settings(
            data_dir=tmp_path,
            providers=[{"name": "up", "kind": "openai", "base_url": upstream.base_url}],
        )
        with LiveServer(create_app(settings), lifespan=True) as server:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
            reply = client.chat.completions.create(
                model="mock-model", messages=[{"role": "user", "content": "Hi"}]
            )
    assert reply.choices[0].message.content == "Hello over HTTP"
    assert json.loads(json.dumps(upstream.requests[0]))["messages"][-1]["content"] == "Hi"
