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
is noted in the report. The template is configuration written by whoever sets up the
assistant: the sandbox keeps it from reaching Python internals, but it is not a CPU and
memory jail (a determined author can still write a slow template).
"""

from __future__ import annotations

import logging
import platform
import re
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from parley import __version__
from parley.messages import Message, Role
from parley.transforms.context import TransformContext, map_text

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
        result: list[Message] = []
        for index, message in enumerate(messages):
            if message.role in self.config.roles:
                message = self._render(template, message, index, context)
            result.append(message)
        return result

    def _render(
        self, template: Template, message: Message, index: int, context: TransformContext
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
                rendered = template.render(message=text, **variables)
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
