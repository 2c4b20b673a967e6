"""Placeholders and the message template: rewriting the text of outgoing messages.

**Placeholders** (Rikkahub's ``PlaceholderTransformer``). In the text parts of every
message, ``{{name}}`` and ``{name}`` (any case) are replaced for these names:

=================  =======================================================
``cur_date``       today in the user's timezone, ``2025-01-06``
``cur_time``       the time there, ``14:30:05``
``cur_datetime``   both, ``2025-01-06 14:30:05``
``model_id``       the model the request goes to (``model_name`` too)
``locale``         the user's locale, ``en-US``
``timezone``       the user's IANA timezone, ``Europe/Paris``
``system_version`` ``Parley 0.1.0 (Python 3.11)``
``device_info``    the server's operating system and machine
``nickname``       the user's name (``user`` when unknown; ``user`` too)
``char``           the assistant's name (``assistant`` when unknown)
=================  =======================================================

Anything else in braces is left as it is (Rikkahub's ``battery_level`` has no meaning on
a server). ``single_braces=False`` replaces only the ``{{name}}`` form.

**Template** (Rikkahub's ``TemplateTransformer``, Jinja2 in place of Pebble). Each text
part of each message whose role is in ``roles`` is replaced by the configured template
rendered with ``message`` (the text), ``role``, ``model``, ``char``, ``user``,
``locale``, ``timezone``, and the message's own time (``time`` ``14:30:05``, ``date``
``2025-01-06``, ``datetime``, ``created_at`` as an aware datetime; now for a message not
yet saved) so a rendering never changes between requests. The message text is a value,
never parsed as a template. Rendering is sandboxed (``ImmutableSandboxedEnvironment``:
no private or dunder attributes, no mutation of lists or dicts, ranges capped), strict
about undefined names, and bounded (``*`` and ``**`` results, output length). A template
that does not compile or does not render leaves the message unchanged, is logged, and
is noted in the report.

The template is written by whoever sets up the assistant, any key holder, and renders
on the event loop: the sandbox keeps it from Python internals, and time keeps it from
the CPU. One request's renderings share ``TEMPLATE_SECONDS``, newest message first; a
trace function looks at the clock every ``TRACE_STEPS`` steps of the template's code
(Jinja compiles a template to Python: every turn of every loop is a step) and stops it
there. A message whose rendering runs out of time is sent as written, and that is noted
once. Before, nested loops froze the server for as long as they ran.
"""

from __future__ import annotations

import logging
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from parley import __version__
from parley.messages import Message, Role
from parley.patterns import Budget
from parley.transforms.protocol import TransformContext, map_text

log = logging.getLogger(__name__)

PLACEHOLDER_NAMES = (
    "cur_date",
    "cur_time",
    "cur_datetime",
    "model_id",
    "model_name",
    "locale",
    "timezone",
    "system_version",
    "device_info",
    "nickname",
    "char",
    "user",
)


@dataclass(frozen=True, slots=True)
class PlaceholderConfig:
    """``enabled``: resolve placeholders. ``single_braces``: also replace ``{name}``
    (Rikkahub does; turn it off when users paste code full of ``{user}``)."""

    enabled: bool = True
    single_braces: bool = True


def placeholder_values(context: TransformContext) -> dict[str, str]:
    local = context.local(None)
    user = context.user_name or "user"
    return {
        "cur_date": f"{local:%Y-%m-%d}",
        "cur_time": f"{local:%H:%M:%S}",
        "cur_datetime": f"{local:%Y-%m-%d %H:%M:%S}",
        "model_id": context.model,
        "model_name": context.model,
        "locale": context.locale,
        "timezone": context.timezone,
        "system_version": f"Parley {__version__} (Python {platform.python_version()})",
        "device_info": f"{platform.system()} {platform.machine()}".strip(),
        "nickname": user,
        "char": context.assistant_name or "assistant",
        "user": user,
    }


_NAMES = "|".join(PLACEHOLDER_NAMES)
_DOUBLE = re.compile(r"\{\{(" + _NAMES + r")\}\}", re.IGNORECASE)
_ANY = re.compile(r"\{\{(" + _NAMES + r")\}\}|\{(" + _NAMES + r")\}", re.IGNORECASE)


class PlaceholderTransformer:
    name = "placeholders"

    def __init__(self, config: PlaceholderConfig) -> None:
        self.config = config

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        pattern = _ANY if self.config.single_braces else _DOUBLE
        if not any(pattern.search(m.text) for m in messages):
            return messages
        values = placeholder_values(context)

        def substitute(match: re.Match[str]) -> str:
            key = next(g for g in match.groups() if g is not None)
            return values[key.lower()]

        return [map_text(m, lambda text: pattern.sub(substitute, text)) for m in messages]


# --- the template ----------------------------------------------------------------------

MAX_SEQUENCE = 100_000
"""The longest string or list a template may build with ``*``."""
MAX_EXPONENT = 1_000
TEMPLATE_SECONDS = 0.1
"""What rendering one request's messages may take, all told."""
TRACE_STEPS = 200
"""Steps of a template's code between looks at the clock."""
OUT_OF_TIME = "the message template ran out of time; sent as written"


class _OutOfTime(BaseException):
    """Raised into a template's code when its time is up (a ``BaseException``: nothing
    in Jinja's runtime catches it)."""


def render_within(budget: Budget, render: Callable[[], str]) -> str:
    """``render()``, stopped (``TimeoutError``) once ``budget`` is spent. Pure Python
    (a template), traced: on this thread only, and the tracer it finds is put back."""
    with budget.spend() as seconds:
        ends = time.monotonic() + seconds
        steps = 0

        def trace(frame: FrameType, event: str, arg: Any) -> Any:
            nonlocal steps
            steps += 1
            if steps % TRACE_STEPS == 0 and time.monotonic() > ends:
                raise _OutOfTime
            return trace

        previous = sys.gettrace()
        sys.settrace(trace)
        try:
            return render()
        except _OutOfTime:
            raise TimeoutError("the message template ran out of time") from None
        finally:
            sys.settrace(previous)


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with ``*`` and ``**`` bounded so that a template cannot
    build a huge string or number."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
                raise SecurityError("exponent too large")
            return left**right
        for sequence, count in ((left, right), (right, left)):
            if (
                isinstance(sequence, str | list | tuple)
                and isinstance(count, int)
                and len(sequence) * count > MAX_SEQUENCE
            ):
                raise SecurityError("result too long")
        return left * right


@dataclass(frozen=True, slots=True)
class TemplateConfig:
    """``template``: Jinja2 source applied to each text part (``{{ message }}`` leaves it
    as it is); ``roles``: the roles whose messages are rendered (Rikkahub renders all);
    ``max_chars``: a longer rendering is refused and the message left unchanged."""

    template: str = "{{ message }}"
    enabled: bool = True
    roles: frozenset[Role] = frozenset({"user"})
    max_chars: int = 200_000


class TemplateTransformer:
    name = "template"

    def __init__(self, config: TemplateConfig) -> None:
        self.config = config
        self._environment = _BoundedEnvironment(
            undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True
        )
        self._compiled: Template | None = None
        self._error: str | None = None
        try:
            self._compiled = self._environment.from_string(config.template)
        except TemplateError as exc:
            self._error = f"the message template does not compile: {exc}"
            log.warning("%s", self._error)

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        template = self._compiled
        if template is None:
            context.report.note(self._error or "the message template does not compile")
            return messages
        result = list(messages)
        budget = Budget(TEMPLATE_SECONDS)
        for index in range(len(result) - 1, -1, -1):  # the newest first
            if result[index].role in self.config.roles:
                result[index] = self._render(template, result[index], index, context, budget)
        if budget.told:
            context.report.note(OUT_OF_TIME)
        return result

    def _render(
        self,
        template: Template,
        message: Message,
        index: int,
        context: TransformContext,
        budget: Budget,
    ) -> Message:
        local = context.local(context.time_of(index))
        variables = {
            "role": message.role,
            "model": context.model,
            "char": context.assistant_name or "assistant",
            "user": context.user_name or "user",
            "locale": context.locale,
            "timezone": context.timezone,
            "time": f"{local:%H:%M:%S}",
            "date": f"{local:%Y-%m-%d}",
            "datetime": f"{local:%Y-%m-%d %H:%M:%S}",
            "created_at": local,
        }

        def render(text: str) -> str:
            try:
                rendered = render_within(budget, lambda: template.render(message=text, **variables))
            except TimeoutError:
                if not budget.told:
                    budget.told = True
                    log.warning("%s", OUT_OF_TIME)
                return text
            except Exception as exc:  # the template is configuration code: never fatal
                note = f"the message template failed ({type(exc).__name__}: {exc}); sent as is"
                log.warning("%s", note)
                context.report.note(note)
                return text
            if len(rendered) > self.config.max_chars:
                context.report.note("the message template output was too long; sent as is")
                return text
            return rendered

        return map_text(message, render)
