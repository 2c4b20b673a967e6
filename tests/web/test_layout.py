"""The page at phone width (375 x 740): the menu button opens the sidebar, the composer
works, and no screen is wider than the phone. The dark theme follows the system."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from parley.testing.mock_openai import MockOpenAI
from tests.support.server import ParleyServer
from tests.web.ui import (
    assert_same_after_reload,
    composer,
    message,
    screenshot,
    send,
    signed_in_context,
    wait_until_idle,
    watch,
)

PHONE = {"width": 375, "height": 740}
SCREENS = ["/", "/kb", "/assistants", "/memory", "/settings"]
WIDEST = """() => {
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > innerWidth + 1 && getComputedStyle(el).position !== 'fixed')
      wide.push(el.tagName.toLowerCase() + (el.className ? '.' + el.className : '')
                + ' right=' + Math.round(box.right));
  }
  return { scroll: document.documentElement.scrollWidth, wide: wide.slice(0, 8) };
}"""


@pytest.fixture(scope="module")
def phone(browser: Browser, server: ParleyServer, key: str) -> Iterator[BrowserContext]:
    context = signed_in_context(browser, server, key, viewport=PHONE, has_touch=True)
    yield context
    context.close()


def assert_fits(page: Page, where: str) -> None:
    found = page.evaluate(WIDEST)
    wide = found["scroll"]
    assert wide <= PHONE["width"], f"{where} is {wide} px wide: {found['wide']}"


def test_the_phone_layout_works(phone: BrowserContext, upstream: MockOpenAI) -> None:
    page = phone.new_page()
    seen = watch(page)
    page.goto("/")
    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_be_visible()
    new_chat = page.get_by_role("link", name="New chat")
    expect(new_chat).not_to_be_in_viewport()
    menu.click()
    expect(new_chat).to_be_in_viewport()
    assert_fits(page, "the open menu")
    # the open drawer covers the menu button: a tap beside it (on the scrim) closes it
    page.mouse.click(PHONE["width"] - 20, PHONE["height"] // 2)
    expect(new_chat).not_to_be_in_viewport()
    expect(page.get_by_role("button", name="Menu")).to_have_attribute("aria-expanded", "false")

    upstream.queue_text("A short answer that wraps on a narrow screen, " * 4)
    box = composer(page)
    expect(box).to_be_in_viewport()
    send(page, "A question from a phone")
    expect(message(page, "A short answer")).to_be_visible()
    wait_until_idle(page)
    assert_fits(page, "the chat")
    screenshot(page, "phone-chat")
    assert_same_after_reload(page)

    for path in SCREENS[1:]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert_fits(page, path)
    # the menu leads to the screens
    page.goto("/")
    page.get_by_role("button", name="Menu").click()
    page.get_by_role("link", name="Knowledge bases").click()
    expect(page.get_by_role("heading", name="Knowledge bases")).to_be_visible()
    expect(page.get_by_role("link", name="New chat")).not_to_be_in_viewport()
    page.close()
    seen.check()


def luminance(rgb: str) -> float:
    """0 (black) to 1 (white), from a computed ``rgb(...)`` colour."""
    parts = [float(x) for x in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    return sum(parts) / (3 * 255)


def test_the_dark_theme_follows_the_system(
    browser: Browser, server: ParleyServer, key: str, upstream: MockOpenAI
) -> None:
    context = signed_in_context(browser, server, key, color_scheme="dark")
    page = context.new_page()
    seen = watch(page)
    upstream.queue_text("Dark mode, with `code` and a list:\n\n- one\n- two\n")
    page.goto("/")
    send(page, "Show me the dark theme")
    expect(message(page, "Dark mode")).to_be_visible()
    wait_until_idle(page)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert luminance(background) < 0.3, background
    assert luminance(text) > 0.6, text
    screenshot(page, "dark-theme")
    page.close()
    seen.check()
    context.close()
