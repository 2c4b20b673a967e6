"""``parley chat``: a terminal chat client for a running server (or any OpenAI-compatible one).

The server keeps the history: the first message starts a conversation (with the system
prompt, if any), later ones send only the new user message plus ``conversation_id``.
Answers stream live as Markdown; ``/help`` lists the commands, ``/new`` starts over,
``/exit`` or Ctrl-D quits, and Ctrl-C stops the answer being streamed. While an answer
streams, the terminal does not echo keys (a ``^C`` echoed after the live region's last
column would wrap the cursor onto a new line and leave a copy of the partial answer).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletionMessageParam
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.markup import escape
from rich.text import Text

_HINT = "Is the server running? Start it with [bold]parley serve[/bold]."
_COMMANDS = (
    ("/help", "this list"),
    ("/new", "start a new conversation"),
    ("/exit, /quit", "leave (Ctrl-D too)"),
)
_HELP = "\n".join(f"  {name:<13} {what}" for name, what in _COMMANDS) + (
    "\n  Ctrl-C        stop the answer being streamed"
)


def api_base(url: str) -> str:
    """The OpenAI base URL for ``url``: a server's root gets ``/v1``; a URL with a path
    (``http://host/v1``, or another server's ``/api/openai/v1``) is used as it is."""
    url = url.strip().rstrip("/")
    return url if urlsplit(url).path else f"{url}/v1"


@contextlib.contextmanager
def _keys_not_echoed() -> Iterator[None]:
    """No echo of typed keys (``^C`` included) while the block runs, on a terminal."""
    try:
        import termios
    except ImportError:  # not POSIX
        yield
        return
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


class _Reply:
    """The answer so far, rendered on each refresh of ``Live`` (not on each token)."""

    def __init__(self) -> None:
        self.reasoning = ""
        self.content = ""

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self.reasoning:
            parts.append(Text(self.reasoning.strip(), style="dim italic"))
        if self.content:
            parts.append(Markdown(self.content))
        return Group(*parts) if parts else Text("...", style="dim")


class _Session:
    def __init__(
        self, url: str, model: str | None, key: str, conversation: str | None, system: str | None
    ) -> None:
        self.console = Console(highlight=False)
        # no retries: a retried chat request could store the user message twice
        self.client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        self.model = model
        self.conversation = conversation
        self.system = system
        self.connected = False  # any request got an answer

    def _pick_model(self) -> str:
        models = [m.id for m in self.client.models.list()]
        return models[0] if models else "default"

    def send(self, text: str) -> None:
        if self.model is None:
            self.model = self._pick_model()
            self.connected = True
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": text}]
        extra: dict[str, Any] = {}
        if self.conversation is None:
            if self.system:
                messages.insert(0, {"role": "system", "content": self.system})
        else:
            extra["conversation_id"] = self.conversation
        stream = self.client.chat.completions.create(
            model=self.model, messages=messages, stream=True, extra_body=extra
        )
        self.connected = True
        reply, new_id = _Reply(), None
        try:
            with _keys_not_echoed(), Live(reply, console=self.console, refresh_per_second=6):
                for chunk in stream:
                    parley = (chunk.model_extra or {}).get("parley")
                    if self.conversation is None and isinstance(parley, dict):
                        self.conversation = new_id = parley.get("conversation_id")
                    for choice in chunk.choices:
                        delta = choice.delta
                        reasoning = (delta.model_extra or {}).get("reasoning_content")
                        if isinstance(reasoning, str):
                            reply.reasoning += reasoning
                        if delta.content:
                            reply.content += delta.content
        except KeyboardInterrupt:
            self.console.print("[dim](stopped)[/dim]")
        finally:
            stream.close()
            if not self.console.is_terminal:
                self.console.line()  # Live ends its last render without one there
            if new_id:
                self.console.print(f"[dim]conversation {escape(str(new_id))}[/dim]")


def _error(exc: openai.APIError) -> str:
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    text = message if isinstance(message, str) and message else exc.message
    if isinstance(exc, openai.APIStatusError):
        return f"error {exc.status_code}: {text}"
    return f"error: {text}"


def run_chat(
    url: str, model: str | None, api_key: str, conversation: str | None, system: str | None
) -> int:
    """Run the REPL until ``/exit``, ``/quit`` or end of input; the process exit code."""
    with contextlib.suppress(ImportError):
        importlib.import_module("readline")  # line editing and history for input()
    url = api_base(url)
    session = _Session(url, model, api_key, conversation, system)
    console = session.console
    tty = sys.stdin.isatty()
    if conversation:
        console.print(f"[dim]continuing conversation {escape(conversation)}[/dim]")
    console.print("[dim]/help lists the commands; Ctrl-C stops a reply[/dim]")
    while True:
        try:
            line = console.input("[bold cyan]you>[/bold cyan] ").strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if not tty:
            console.print(line, markup=False)  # piped input is not echoed
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/new":
            session.conversation = None
            console.print("[dim]new conversation[/dim]")
            continue
        if line == "/help":
            console.print(_HELP, markup=False)
            continue
        if _looks_like_a_command(line):
            console.print(f"unknown command {line}; /help lists them", markup=False)
            continue
        try:
            session.send(line)
        except KeyboardInterrupt:
            console.print("[dim](stopped)[/dim]")
        except openai.APIConnectionError as exc:
            console.print(f"cannot reach {url}: {exc.message}", style="red", markup=False)
            if not session.connected:
                console.print(_HINT)
                return 1
        except openai.APIError as exc:
            console.print(_error(exc), style="red", markup=False)


def _looks_like_a_command(line: str) -> bool:
    """``/word`` alone; a message that merely starts with a slash (``/usr/bin is ...``)
    is sent."""
    return line.startswith("/") and line[1:].isalpha()
