"""Signing in with a key: the key becomes an HttpOnly cookie the page's script cannot
read and the browser never stores the key; a wrong key reads as a sentence; sign-out and
revocation end the session; the page is served with a strict CSP and frame protection."""

from __future__ import annotations

import httpx
from playwright.sync_api import Browser, expect

from tests.support.server import ParleyServer
from tests.web.ui import new_context, sign_in, watch


def test_a_pasted_key_becomes_an_http_only_cookie_the_page_cannot_read(
    browser: Browser, server: ParleyServer, key: str
) -> None:
    context = new_context(browser, server)
    page = context.new_page()
    seen = watch(page)
    page.goto("/")
    # keys exist: the page asks for one before anything else
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(page.get_by_role("textbox", name="Message")).to_have_count(0)

    sign_in(page, key)
    expect(page.get_by_role("button", name="Sign in")).to_have_count(0)

    cookies = {c["name"]: c for c in context.cookies()}
    session = cookies["parley_session"]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    assert key not in session["value"]
    assert "parley_session" not in page.evaluate("document.cookie")
    stored = page.evaluate(
        """() => [localStorage, sessionStorage].flatMap(
            (s) => Object.keys(s).map((k) => k + '=' + s.getItem(k)))"""
    )
    assert not [entry for entry in stored if key in entry or "sk-parley-" in entry], stored
    assert key not in page.content()

    page.reload()
    expect(page.get_by_role("navigation", name="Chats")).to_be_attached()
    expect(page.get_by_role("button", name="Sign in")).to_have_count(0)
    seen.check()
    context.close()


def test_a_wrong_key_is_refused_in_a_readable_sentence(
    browser: Browser, server: ParleyServer
) -> None:
    context = new_context(browser, server)
    page = context.new_page()
    seen = watch(page)
    page.goto("/")
    page.get_by_label("API key").fill("sk-parley-not-a-real-key-0000000000")
    page.get_by_role("button", name="Sign in").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Sign-in failed")
    assert "{" not in alert.inner_text(), "the error is shown as raw JSON"
    assert not [c for c in context.cookies() if c["name"] == "parley_session"]
    # the refused sign-in is a 401 the page expected: the console's resource error for it
    # is all there may be
    seen.console_errors[:] = [m for m in seen.console_errors if "401" not in m]
    seen.check()
    context.close()


def test_sign_out_ends_the_session(browser: Browser, server: ParleyServer, key: str) -> None:
    context = new_context(browser, server)
    page = context.new_page()
    seen = watch(page)
    sign_in(page, key)
    token = next(c["value"] for c in context.cookies() if c["name"] == "parley_session")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    page.reload()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    # the old cookie is dead on the server too, not only forgotten by the browser
    answer = httpx.get(f"{server.url}/v1/conversations", cookies={"parley_session": token})
    assert answer.status_code == 401, answer.text
    seen.console_errors[:] = [m for m in seen.console_errors if "401" not in m]
    seen.check()
    context.close()


def test_revoking_the_key_ends_its_sessions(browser: Browser, server: ParleyServer) -> None:
    doomed = server.create_key("mallory")
    context = new_context(browser, server)
    page = context.new_page()
    seen = watch(page)
    sign_in(page, doomed)
    revoked = server.cli("keys", "revoke", doomed[: len("sk-parley-") + 6])  # its prefix
    assert revoked.returncode == 0, revoked.stderr
    page.reload()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    seen.console_errors[:] = [m for m in seen.console_errors if "401" not in m]
    seen.check()
    context.close()


def test_the_page_is_served_with_a_strict_csp_and_frame_protection(server: ParleyServer) -> None:
    for path in ("/", "/c/conv_anything", "/kb", "/settings"):
        answer = httpx.get(server.url + path)
        assert answer.status_code == 200, (path, answer.status_code)
        assert answer.headers["content-type"].startswith("text/html")
        csp = answer.headers["content-security-policy"]
        directives = {part.split()[0]: part.split()[1:] for part in csp.split(";") if part.strip()}
        assert directives["script-src"] == ["'self'"], csp
        assert "'unsafe-inline'" not in csp, csp
        assert "'unsafe-eval'" not in csp, csp
        assert directives.get("frame-ancestors") == ["'none'"], csp
        assert directives.get("object-src") == ["'none'"], csp
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_the_page_loads_with_no_csp_violation(
    browser: Browser, server: ParleyServer, key: str
) -> None:
    context = new_context(browser, server)
    page = context.new_page()
    seen = watch(page)
    sign_in(page, key)
    for screen in ("Knowledge bases", "Assistants", "Memory", "Settings"):
        page.get_by_role("link", name=screen).click()
        page.wait_for_load_state("networkidle")
    assert not seen.csp_violations()
    seen.check()
    context.close()
