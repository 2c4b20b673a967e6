"""The web UI in a real browser: Debian's Chromium driven by Playwright, against a real
``parley serve`` in front of the mock upstream.

Each module gets one server (keys exist, so the page needs a sign-in) and one browser;
each test a fresh page in a signed-in browser context, watched for uncaught errors,
dialogs and Content-Security-Policy violations (any of them fails the test).

Playwright never downloads a browser here: it launches the system's Chromium
(``PARLEY_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on the PATH). Without
one the browser tests skip, saying how to install it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from parley.testing.mock_openai import MockOpenAI
from tests.support.server import ParleyServer
from tests.web.ui import (
    CHROMIUM_FLAGS,
    NO_CHROMIUM,
    TIMEOUT_MS,
    Watch,
    chromium_path,
    signed_in_context,
    watch,
    web_config,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page


@pytest.fixture(scope="module")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip(NO_CHROMIUM)
    return path


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Browser]:
    """Debian's Chromium, launched by Playwright (which downloads no browser)."""
    from playwright.sync_api import expect, sync_playwright

    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_FLAGS
        )
        expect.set_options(timeout=TIMEOUT_MS)
        yield launched
        launched.close()
    finally:
        playwright.stop()


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    """A real ``parley serve`` of the module's own, the mock upstream as its provider."""
    with ParleyServer(tmp_path_factory.mktemp("web"), web_config(upstream)) as parley:
        yield parley


@pytest.fixture(scope="module")
def key(server: ParleyServer) -> str:
    """alice's key (an admin's, so that every screen has something to show). A key
    existing means the page asks for one."""
    return server.create_key("alice", "--admin")


@pytest.fixture(scope="module")
def context(browser: Browser, server: ParleyServer, key: str) -> Iterator[BrowserContext]:
    """A browser context signed in as alice (its pages share the session cookie)."""
    ctx = signed_in_context(browser, server, key)
    yield ctx
    ctx.close()


@pytest.fixture
def watched(context: BrowserContext) -> Iterator[tuple[Page, Watch]]:
    page = context.new_page()
    seen = watch(page)
    yield page, seen
    page.close()
    seen.check()


@pytest.fixture
def page(watched: tuple[Page, Watch]) -> Page:
    """A fresh page of the signed-in context; the test fails on a CSP violation, an
    uncaught error or a dialog."""
    return watched[0]
