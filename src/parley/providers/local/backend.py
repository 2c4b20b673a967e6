"""What a local-model runtime gives the worker: ``load(Load) -> LocalModel``.

``llama`` (llama-cpp-python, ``llama.py``) is the default. Any other backend is named by
an import path, ``package.module:load``, in the provider's ``backend`` setting; the
worker imports it, so a runtime Parley does not ship (or a test's scripted one) runs
under the same supervision. Only the worker process imports a backend.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from parley.providers.local.protocol import Load

DEFAULT_BACKEND = "llama"


@dataclass(frozen=True, slots=True)
class Outcome:
    finish_reason: str | None
    """``stop``, ``length`` (max_tokens reached) or None when cancelled."""
    prompt_tokens: int
    completion_tokens: int
    kept_messages: int


class LocalModel(Protocol):
    name: str
    context_tokens: int
    system_info: str

    def generate(
        self,
        messages: list[dict[str, str]],
        options: dict[str, Any],
        max_tokens: int | None,
        cancelled: threading.Event,
        emit: Callable[[str], None],
    ) -> Outcome:
        """Blocking: generate, calling ``emit`` with each piece of text; stop soon after
        ``cancelled`` is set."""
        ...


Backend = Callable[[Load], LocalModel]


def load_backend(name: str) -> Backend:
    """The backend named ``llama`` or ``module:attribute``; ValueError if there is none."""
    if name == DEFAULT_BACKEND:
        from parley.providers.local import llama

        return llama.load
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"backend {name!r} is neither 'llama' nor 'module:attribute'")
    module = importlib.import_module(module_name)
    backend = getattr(module, attribute, None)
    if not callable(backend):
        raise ValueError(f"backend {name!r}: {attribute} is not a callable in {module_name}")
    loader: Backend = backend
    return loader
