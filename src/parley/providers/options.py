"""Which of a request's fields a provider honours, refuses or ignores.

Every Chat Completions field a client sends is either sent on (unchanged or translated:
``Provider.options``), or refused with a 400 that names it, or, for the
``ADVISORY_OPTIONS`` that never change the reply (who asks, how the upstream keeps and
bills the call), ignored by a provider that has no use for it, and named in the
response's ``x-parley-ignored-params``. Nothing is dropped without a word.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from parley.errors import InvalidRequest
from parley.messages import ToolSpec
from parley.providers.protocol import ADVISORY_OPTIONS, Provider

NO_EFFECT: dict[str, Any] = {
    "logprobs": False,
    "top_logprobs": 0,
    "parallel_tool_calls": True,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "logit_bias": {},
    "modalities": ["text"],
}
"""Values that ask for what every provider does anyway (OpenAI's defaults): sending one
asks nothing of the provider."""


def sent_options(options: Mapping[str, Any], tools: Iterable[ToolSpec]) -> frozenset[str]:
    """The fields of a request that ask something of its provider: its options but those
    set to ``NO_EFFECT``, and ``strict`` when one of its tools asks for it."""
    asked = {name for name, value in options.items() if NO_EFFECT.get(name, ...) != value}
    return frozenset(asked | ({"strict"} if any(t.strict for t in tools) else set()))


@dataclass(frozen=True, slots=True)
class OptionCheck:
    refused: tuple[str, ...] = ()
    """Sent, not honoured, and they would change the reply."""
    ignored: tuple[str, ...] = ()
    """Sent, advisory, and the provider has no use for them."""


def check_options(provider: Provider, sent: Collection[str]) -> OptionCheck:
    """What ``provider`` does with the request fields ``sent`` (``REQUEST_OPTIONS``
    names, and ``strict``)."""
    missing = sorted(name for name in sent if name not in provider.options)
    return OptionCheck(
        refused=tuple(n for n in missing if n not in ADVISORY_OPTIONS),
        ignored=tuple(n for n in missing if n in ADVISORY_OPTIONS),
    )


def refuse_unsupported(check: OptionCheck, model: str, provider: Provider) -> None:
    """Raise the 400 for the first refused field, if any."""
    if not check.refused:
        return
    name = check.refused[0]
    others = f" (nor {', '.join(check.refused[1:])})" if len(check.refused) > 1 else ""
    param = "tools.function.strict" if name == "strict" else name
    raise InvalidRequest(
        f"{name} is not supported by model {model!r}{others}: its provider "
        f"{provider.name!r} has no equivalent; leave it out or choose another model",
        param=param,
        code="unsupported_parameter",
    )
