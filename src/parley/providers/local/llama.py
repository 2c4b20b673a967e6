"""The llama-cpp-python backend: a GGUF file loaded and run inside the worker process.

What belongs here: loading the model, counting a chat prompt's tokens with the GGUF's
own chat template, fitting the chat into the context (``fitting``), and one blocking
streamed generation that stops at the next token once cancelled. Only the worker
imports this module: llama.cpp's native code never runs in the server.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from parley.providers.local.backend import Outcome
from parley.providers.local.fitting import MESSAGE_OVERHEAD, fit_context, message_tokens
from parley.providers.local.protocol import Load

DEFAULT_RESERVE = 512
"""Tokens kept free for the reply when the request sets no ``max_tokens``."""


def load(request: Load) -> LlamaModel:
    """Load the GGUF at ``request.path``; ImportError or ValueError say why not."""
    llama_cpp: Any = importlib.import_module("llama_cpp")
    chat_format: Any = importlib.import_module("llama_cpp.llama_chat_format")
    llm = llama_cpp.Llama(
        model_path=request.path,
        n_ctx=request.context_tokens,
        n_threads=request.threads,
        verbose=False,
    )
    info = llama_cpp.llama_print_system_info()
    system_info = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return LlamaModel(llm, _formatter(llm, chat_format), system_info.strip())


class LlamaModel:
    """A loaded ``Llama`` plus what is needed to count the tokens of a chat prompt."""

    def __init__(self, llm: Any, formatter: Any, system_info: str) -> None:
        self.llm = llm
        self._formatter = formatter
        self.context_tokens = int(llm.n_ctx())
        self.system_info = system_info
        metadata = getattr(llm, "metadata", None) or {}
        self.name = str(metadata.get("general.name") or "gguf")

    # --- the Tokenizer of ``fitting`` ---------------------------------------------

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
        return 1 + sum(message_tokens(self, m) for m in messages) + MESSAGE_OVERHEAD

    def truncate(self, text: str, limit: int, *, keep_end: bool) -> str:
        tokens = self.tokens(text)
        if len(tokens) <= limit:
            return text
        kept = tokens[-limit:] if keep_end and limit > 0 else tokens[: max(limit, 0)]
        raw: bytes = self.llm.detokenize(kept, special=True)
        return raw.decode("utf-8", errors="ignore")

    # --- generation -----------------------------------------------------------------

    def generate(
        self,
        messages: list[dict[str, str]],
        options: dict[str, Any],
        max_tokens: int | None,
        cancelled: threading.Event,
        emit: Callable[[str], None],
    ) -> Outcome:
        """Fit the prompt, generate, emit each text piece; stop at the next token once
        ``cancelled`` is set."""
        reserve = min(max_tokens or DEFAULT_RESERVE, self.context_tokens // 2)
        fitted, prompt_tokens = fit_context(self, messages, self.context_tokens - reserve)
        kwargs = dict(options)
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        chunks = self.llm.create_chat_completion(messages=fitted, stream=True, **kwargs)
        pieces: list[str] = []
        finish: str | None = None
        try:
            for chunk in chunks:
                if cancelled.is_set():
                    finish = None
                    break
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        pieces.append(content)
                        emit(content)
                    finish = choice.get("finish_reason") or finish
        finally:
            chunks.close()
        text = "".join(pieces)
        # a chunk can hold more than one token (multi-byte characters, held-back stop text)
        completion = max(len(pieces), len(self.tokens(text))) if text else 0
        if max_tokens is not None and max_tokens > 0:
            completion = min(completion, max_tokens)
        return Outcome(finish, prompt_tokens, completion, len(fitted))


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
