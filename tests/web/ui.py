"""Helpers of the browser tests: finding Chromium, the server's configuration, watching a
page for what must not happen, signing in, and reading the chat as a person sees it.

Elements are found by role and accessible name, the names the UI gives its controls in
English (see web/src/locales): "Message", "Send", "Stop", "Regenerate", "Edit",
"Previous version", "Next version", "Approve", "Deny", "Upload files", "Sign in",
"API key", "Menu".
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from parley.testing.mock_openai import MockOpenAI
from tests.conftest import server_config
from tests.support.server import ParleyServer

if TYPE_CHECKING:
    # imported where used, so that conftest.py (and the bundle tests) load without it
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Dialog, Locator, Page

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
TIMEOUT_MS = 15_000
"""How long a step may wait for the page (the suite runs on 2 busy cores)."""
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
NO_CHROMIUM = (
    "Chromium not found: the browser tests drive Debian's Chromium "
    "(apt-get install chromium, or set PARLEY_CHROMIUM to a Chromium binary)"
)
PAYLOAD = "<img src=x onerror=window.__pwned=1>"
"""Markup that runs script if anything renders it as HTML unsanitised."""


def chromium_path() -> str | None:
    """The Chromium to drive: $PARLEY_CHROMIUM, else chromium or chromium-browser."""
    named = os.environ.get("PARLEY_CHROMIUM")
    if named:
        return named if Path(named).is_file() else shutil.which(named)
    return shutil.which("chromium") or shutil.which("chromium-browser")


def web_config(upstream: MockOpenAI, **overrides: Any) -> dict[str, Any]:
    """The shared test configuration with the mock as the only provider, lexical
    knowledge search (certain matches), and ``workspace_write`` offered on every turn
    and waiting for a person's approval."""
    config = server_config(
        upstream,
        providers=[
            {
                "name": "mock",
                "kind": "openai",
                "base_url": upstream.base_url,
                "api_key": "sk-upstream-secret",
            }
        ],
        knowledge={"embedder": "none"},
        tools={
            "default_tools": ["workspace_write"],
            "approval": {"workspace_write": "ask"},
        },
    )
    config.update(overrides)
    return config


# --- watching a page ------------------------------------------------------------------


@dataclass
class Watch:
    """What a page did that no test should see: uncaught errors, dialogs (alert() is
    what injected script calls first), console errors about the Content-Security-Policy."""

    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def on_dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def csp_violations(self) -> list[str]:
        return [m for m in self.console_errors if "Content Security Policy" in m]

    def check(self) -> None:
        problems = []
        if self.csp_violations():
            problems.append(f"CSP violations: {self.csp_violations()}")
        if self.dialogs:
            problems.append(f"dialogs opened: {self.dialogs}")
        if self.page_errors:
            problems.append(f"uncaught errors in the page: {self.page_errors}")
        assert not problems, "; ".join(problems)


def watch(page: Page) -> Watch:
    seen = Watch()
    page.on("console", seen.on_console)
    page.on("pageerror", lambda error: seen.page_errors.append(str(error)))
    page.on("dialog", seen.on_dialog)
    return seen


# --- browser contexts and signing in --------------------------------------------------


def new_context(browser: Browser, server: ParleyServer, **options: Any) -> BrowserContext:
    settings: dict[str, Any] = {
        "base_url": server.url,
        "viewport": {"width": 1280, "height": 800},
        "locale": "en-US",
        "color_scheme": "light",
        "timezone_id": "UTC",
        "reduced_motion": "reduce",
        **options,
    }
    context = browser.new_context(**settings)
    context.set_default_timeout(TIMEOUT_MS)
    return context


def sign_in(page: Page, key: str) -> None:
    """Sign in as a person does: paste the key, press Sign in, see the app."""
    page.goto("/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    # the shell replaces the form (its sidebar is hidden behind Menu on a phone)
    page.get_by_role("navigation", name="Chats").wait_for(state="attached")


def signed_in_context(
    browser: Browser, server: ParleyServer, key: str, **options: Any
) -> BrowserContext:
    context = new_context(browser, server, **options)
    page = context.new_page()
    sign_in(page, key)
    page.close()
    return context


def screenshot(page: Page, name: str) -> None:
    """docs/screenshots/<name>.png, only with PARLEY_SCREENSHOTS=1 (so that ordinary
    runs leave the work tree as it was)."""
    if os.environ.get("PARLEY_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), animations="disabled", caret="hide")


# --- the chat, as a person sees it ----------------------------------------------------


def composer(page: Page) -> Locator:
    return page.get_by_role("textbox", name="Message")


def send(page: Page, text: str) -> None:
    """Type a message and press Send."""
    box = composer(page)
    box.fill(text)
    page.get_by_role("button", name="Send", exact=True).click()


MESSAGE = re.compile(r"^(You|Assistant)$")
"""The accessible names of message articles (tool and approval cards are articles too,
named after their tool)."""


def messages(page: Page) -> Locator:
    """The message elements of the conversation shown: <article aria-label="You"> and
    <article aria-label="Assistant">."""
    return page.get_by_role("article", name=MESSAGE)


def message(page: Page, text: str) -> Locator:
    """The one message holding ``text``."""
    return messages(page).filter(has_text=text)


def transcript(page: Page) -> list[str]:
    """The messages' text, whitespace folded (what a reload must show again). Their text
    content: the browser skips rendering messages off screen (content-visibility), which
    empties their innerText."""
    texts = messages(page).all_text_contents()
    return [re.sub(r"\s+", " ", text).strip() for text in texts]


def wait_until_idle(page: Page) -> None:
    """The reply has ended: no Stop button, Send is back."""
    from playwright.sync_api import expect

    expect(page.get_by_role("button", name="Stop")).to_have_count(0)


def assert_same_after_reload(page: Page) -> list[str]:
    """Reload and compare the visible messages: the page must show what a reload shows."""
    from playwright.sync_api import expect

    wait_until_idle(page)
    before = transcript(page)
    assert before, "no message is shown"
    page.reload()
    expect(messages(page)).to_have_count(len(before))
    after = transcript(page)
    assert after == before, f"before reload: {before}\nafter reload:  {after}"
    return after


def conversation_id(page: Page) -> str:
    """The conversation the URL names (/c/{id})."""
    page.wait_for_url(re.compile(r"/c/[^/]+$"))
    return page.url.rsplit("/", 1)[-1]


def api(server: ParleyServer, key: str) -> httpx.Client:
    return server.client(key)


# --- knowledge bases ------------------------------------------------------------------


def create_knowledge_base(page: Page, name: str) -> None:
    """On /kb: New knowledge base, name it, Create; the base's own page opens."""
    from playwright.sync_api import expect

    page.get_by_role("button", name="New knowledge base").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name", exact=True).fill(name)
    dialog.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()


def upload(page: Page, name: str, text: str, media_type: str = "text/plain") -> None:
    """Pick one file with "Upload files" (the input behind the button)."""
    from playwright.sync_api import FilePayload

    payload: FilePayload = {"name": name, "mimeType": media_type, "buffer": text.encode()}
    page.get_by_label("Upload files", exact=True).set_input_files([payload])


def choose_knowledge_base(page: Page, name: str) -> None:
    """Choose a base for the conversation in the chat's knowledge-base picker (a
    multiple <select>: a listbox)."""
    picker = page.get_by_role("listbox", name=re.compile("knowledge", re.I))
    picker.select_option(label=name)
