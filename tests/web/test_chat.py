"""Chatting in the browser: a reply streams in, stops on request and stays marked as
interrupted, regenerates into versions a person moves between, a user message is
edited; after every step a reload shows exactly what the page showed. The main thread
stays free while a reply streams at 200 tokens/s, and a 2,000-message conversation
opens windowed and scrolls to its start."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Locator, Page, expect

from parley.testing.mock_openai import MockOpenAI
from tests.support.server import ParleyServer
from tests.web.ui import (
    api,
    assert_same_after_reload,
    composer,
    conversation_id,
    message,
    messages,
    send,
    wait_until_idle,
)

VERSION = re.compile(r"^Version (\d+) of (\d+)$")


def versions_of(item: Locator) -> tuple[int, int] | None:
    """The version a message shows, as its ‹ n/m › navigation names it ("Version n of m")."""
    label = item.get_by_label(VERSION)
    if not label.count():
        return None
    found = VERSION.match(label.first.get_attribute("aria-label") or "")
    assert found, label.first.get_attribute("aria-label")
    assert label.first.text_content() == f"{found[1]}/{found[2]}"
    return int(found[1]), int(found[2])


def stored_messages(server: ParleyServer, key: str, cid: str) -> list[dict[str, object]]:
    with api(server, key) as client:
        answer = client.get(f"/conversations/{cid}")
    assert answer.status_code == 200, answer.text
    found: list[dict[str, object]] = answer.json()["messages"]
    return found


def test_a_reply_streams_in_piece_by_piece(
    page: Page, upstream: MockOpenAI, server: ParleyServer, key: str
) -> None:
    upstream.queue_text(*[f"word{i} " for i in range(25)], delay=0.08)
    page.goto("/")
    send(page, "Tell me twenty-five words")
    # the person's message shows at once, the reply grows while it streams
    expect(message(page, "Tell me twenty-five words")).to_be_visible()
    reply = message(page, "word3")
    expect(reply).to_be_visible()
    assert "word24" not in (reply.text_content() or ""), (
        "the reply appeared whole, not as it streamed"
    )
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(reply).to_contain_text("word24")
    wait_until_idle(page)
    # the streaming reply is announced to screen readers
    assert page.locator("[aria-live]").count() >= 1
    cid = conversation_id(page)
    stored = stored_messages(server, key, cid)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["status"] == "complete"
    shown = assert_same_after_reload(page)
    assert any("word24" in text for text in shown)
    # the sidebar lists it (its provisional title is the first line)
    expect(page.get_by_role("link", name="Tell me twenty-five words")).to_be_visible()


def test_stop_ends_the_reply_and_marks_it_interrupted(
    page: Page, upstream: MockOpenAI, server: ParleyServer, key: str
) -> None:
    upstream.queue_text(*[f"tick{i} " for i in range(300)], delay=0.05)
    page.goto("/")
    send(page, "Count to three hundred slowly")
    reply = message(page, "tick2")
    expect(reply).to_be_visible()
    page.get_by_role("button", name="Stop").click()
    wait_until_idle(page)
    expect(reply).to_contain_text(re.compile("interrupted", re.IGNORECASE))
    assert "tick299" not in (reply.text_content() or "")
    cid = conversation_id(page)
    deadline = time.monotonic() + 10
    while (last := stored_messages(server, key, cid)[-1])["status"] != "interrupted":
        assert time.monotonic() < deadline, last
        time.sleep(0.05)  # the server saves the stopped reply as it unwinds
    assert_same_after_reload(page)
    expect(message(page, "tick2")).to_contain_text(re.compile("interrupted", re.IGNORECASE))


def test_escape_stops_the_reply(page: Page, upstream: MockOpenAI) -> None:
    upstream.queue_text(*[f"tock{i} " for i in range(300)], delay=0.05)
    page.goto("/")
    send(page, "Count again")
    expect(message(page, "tock2")).to_be_visible()
    composer(page).press("Escape")
    wait_until_idle(page)
    expect(message(page, "tock2")).to_contain_text(re.compile("interrupted", re.IGNORECASE))


def test_regenerate_makes_versions_to_move_between(page: Page, upstream: MockOpenAI) -> None:
    upstream.queue_text("The first answer is blue.")
    page.goto("/")
    send(page, "Pick a colour")
    expect(message(page, "The first answer is blue.")).to_be_visible()
    wait_until_idle(page)
    upstream.queue_text("The second answer is green.")
    reply = messages(page).last
    reply.hover()
    reply.get_by_role("button", name="Regenerate").click()
    second = message(page, "The second answer is green.")
    expect(second).to_be_visible()
    wait_until_idle(page)
    expect(message(page, "The first answer is blue.")).to_have_count(0)
    assert versions_of(second) == (2, 2)
    assert_same_after_reload(page)

    reply = messages(page).last
    reply.hover()
    reply.get_by_role("button", name="Previous version").click()
    first = message(page, "The first answer is blue.")
    expect(first).to_be_visible()
    assert versions_of(first) == (1, 2)
    expect(reply.get_by_role("button", name="Previous version")).to_be_disabled()
    # the selection is stored: a reload shows version 1 again
    assert_same_after_reload(page)
    assert versions_of(message(page, "The first answer is blue.")) == (1, 2)

    reply = messages(page).last
    reply.hover()
    reply.get_by_role("button", name="Next version").click()
    expect(message(page, "The second answer is green.")).to_be_visible()
    assert_same_after_reload(page)


def test_editing_a_user_message_makes_a_new_version_and_reply(
    page: Page, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Did you mean France?")
    page.goto("/")
    send(page, "What is the capital of Frnace?")
    expect(message(page, "Did you mean France?")).to_be_visible()
    wait_until_idle(page)

    upstream.queue_text("Paris is the capital of France.")
    user = messages(page).first
    user.hover()
    user.get_by_role("button", name="Edit").click()
    box = user.get_by_role("textbox")
    expect(box).to_have_value("What is the capital of Frnace?")
    box.fill("What is the capital of France?")
    user.get_by_role("button", name=re.compile(r"^(Save|Send|Save and send)", re.I)).click()

    expect(message(page, "Paris is the capital of France.")).to_be_visible()
    wait_until_idle(page)
    edited = message(page, "What is the capital of France?")
    expect(edited).to_be_visible()
    expect(message(page, "Frnace")).to_have_count(0)
    assert versions_of(edited) == (2, 2)
    assert_same_after_reload(page)

    # the first version and its reply are still there
    user = messages(page).first
    user.hover()
    user.get_by_role("button", name="Previous version").click()
    expect(message(page, "Did you mean France?")).to_be_visible()
    expect(message(page, "Frnace")).to_be_visible()
    assert_same_after_reload(page)


def test_enter_sends_and_shift_enter_starts_a_new_line(page: Page, upstream: MockOpenAI) -> None:
    upstream.queue_text("Two lines received.")
    page.goto("/")
    box = composer(page)
    box.click()
    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    expect(box).to_have_value("first line\nsecond line")
    page.keyboard.press("Enter")
    expect(message(page, "Two lines received.")).to_be_visible()
    expect(box).to_have_value("")
    sent = upstream.requests[-1]["messages"][-1]["content"]
    assert sent == "first line\nsecond line", sent


def test_deep_links_and_the_back_button(page: Page, upstream: MockOpenAI) -> None:
    upstream.queue_text("Alpha answer.")
    page.goto("/")
    send(page, "Alpha question")
    expect(message(page, "Alpha answer.")).to_be_visible()
    wait_until_idle(page)
    first = conversation_id(page)
    page.get_by_role("link", name="New chat").click()
    expect(messages(page)).to_have_count(0)
    upstream.queue_text("Beta answer.")
    send(page, "Beta question")
    expect(message(page, "Beta answer.")).to_be_visible()
    wait_until_idle(page)
    second = conversation_id(page)
    assert second != first
    # the sidebar opens the first one, and Back returns to the second
    page.get_by_role("link", name="Alpha question").click()
    page.wait_for_url(f"**/c/{first}")
    expect(message(page, "Alpha answer.")).to_be_visible()
    page.go_back()
    page.wait_for_url(f"**/c/{second}")
    expect(message(page, "Beta answer.")).to_be_visible()
    expect(message(page, "Alpha answer.")).to_have_count(0)
    # a deep link opens the conversation as it is stored
    page.goto(f"/c/{first}")
    expect(message(page, "Alpha answer.")).to_be_visible()


def test_ctrl_k_searches_titles_and_message_text(page: Page, upstream: MockOpenAI) -> None:
    upstream.queue_text("A reply that mentions the xylophone.")
    page.goto("/")
    send(page, "Zebra crossing question")
    expect(message(page, "xylophone")).to_be_visible()
    wait_until_idle(page)
    upstream.queue_text("Something else.")
    page.get_by_role("link", name="New chat").click()
    send(page, "Unrelated question")
    expect(message(page, "Something else.")).to_be_visible()
    wait_until_idle(page)

    page.keyboard.press("Control+k")
    search = page.get_by_role("searchbox", name="Search")
    expect(search).to_be_focused()
    conversations = page.get_by_role("navigation", name="Chats")
    search.fill("Zebra")
    expect(conversations.get_by_role("link", name="Zebra crossing question")).to_be_visible()
    expect(conversations.get_by_role("link", name="Unrelated question")).to_have_count(0)
    # the text of the messages is searched too
    search.fill("xylophone")
    expect(conversations.get_by_role("link", name="Zebra crossing question")).to_be_visible()
    expect(conversations.get_by_role("link", name="Unrelated question")).to_have_count(0)
    search.fill("")
    expect(conversations.get_by_role("link", name="Unrelated question")).to_be_visible()


LONG_TASK_OBSERVER = """
window.__longtasks = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__longtasks.push(entry.duration);
}).observe({ type: "longtask", buffered: true });
"""
MARKDOWN_PIECES = [
    "## Notes\n\n",
    *[f"Point **{i}** has `code{i}` and a [link](https://example.com/{i}). " for i in range(80)],
    "\n\n```python\n",
    *[f"value_{i} = compute({i})\n" for i in range(120)],
    "```\n\n",
    *[f"- item {i}\n" for i in range(120)],
    "\nThe end of the stream.",
]
"""About 320 pieces: 1.6 s at 200 tokens/s, Markdown with a code block and a list."""
LONG_TASK_LIMIT_MS = 200
"""The longest main-thread task allowed while the reply streams. The aim is 50 ms; a
headless Chromium sharing 2 cores with the server and the suite sees single tasks well
over that now and then, so the bound catches a re-render per token (seconds of long
tasks), not scheduler noise; the numbers are printed (pytest -s)."""


def test_a_reply_at_200_tokens_a_second_keeps_the_main_thread_free(
    page: Page, upstream: MockOpenAI
) -> None:
    page.add_init_script(LONG_TASK_OBSERVER)
    page.goto("/")
    composer(page).wait_for()
    upstream.queue_text(*MARKDOWN_PIECES, delay=0.005)
    page.evaluate("window.__longtasks = []")
    started = time.monotonic()
    send(page, "Write a long note")
    expect(message(page, "The end of the stream.")).to_be_visible()
    wait_until_idle(page)
    seconds = time.monotonic() - started
    tasks: list[float] = page.evaluate("window.__longtasks")
    print(
        f"\nlong tasks while streaming {len(MARKDOWN_PIECES)} pieces in {seconds:.2f} s: "
        f"{len(tasks)}, longest {max(tasks, default=0):.0f} ms, "
        f"total {sum(tasks):.0f} ms: {[round(t) for t in tasks]}"
    )
    assert max(tasks, default=0) <= LONG_TASK_LIMIT_MS, tasks
    # a re-render per token shows as long tasks adding up to much of the stream's time
    assert sum(tasks) <= 0.25 * seconds * 1000, tasks
    code = page.locator("pre code").last
    expect(code).to_contain_text("value_119 = compute(119)")


@pytest.fixture(scope="module")
def long_conversation(server: ParleyServer, key: str, upstream: MockOpenAI) -> str:
    """A conversation of 2,002 messages (1,000 exchanges stored by one request)."""
    history: list[dict[str, str]] = []
    for i in range(1000):
        history.append({"role": "user", "content": f"Question {i:04d}"})
        history.append({"role": "assistant", "content": f"Answer {i:04d}"})
    history.append({"role": "user", "content": "Question last"})
    upstream.queue_text("Answer last")
    with api(server, key) as client:
        answer = client.post("/chat/completions", json={"model": "fast", "messages": history})
    assert answer.status_code == 200, answer.text
    cid: str = answer.json()["parley"]["conversation_id"]
    return cid


SCROLL_TO_TOP = """() => {
  const first = document.querySelector('article');
  let box = first && first.parentElement;
  while (box && !(box.scrollHeight > box.clientHeight + 1 &&
                  /(auto|scroll)/.test(getComputedStyle(box).overflowY))) {
    box = box.parentElement;
  }
  (box || document.scrollingElement).scrollTop = 0;
  return document.querySelector('article')?.textContent ?? '';
}"""
MOST_RENDERED = 400
"""Message elements a 2,000-message conversation may have in the page at once."""
OPEN_LIMIT_MS = 500
"""The longest main-thread task allowed while it opens (reading 2,002 messages)."""


def test_a_2000_message_conversation_opens_windowed_and_scrolls_to_its_start(
    page: Page, long_conversation: str
) -> None:
    page.add_init_script(LONG_TASK_OBSERVER)
    started = time.monotonic()
    page.goto(f"/c/{long_conversation}")
    expect(message(page, "Answer last")).to_be_visible()
    opened = time.monotonic() - started
    opening: list[float] = page.evaluate("window.__longtasks.splice(0)")
    rendered = messages(page).count()
    assert rendered <= MOST_RENDERED, f"{rendered} messages in the page at once"
    most = rendered
    rounds = 0
    deadline = time.monotonic() + 60
    while not message(page, "Question 0000").count():
        assert time.monotonic() < deadline, f"not at the start after {rounds} scrolls"
        first = page.evaluate(SCROLL_TO_TOP)
        rounds += 1
        # scrolled to the top: earlier messages come (or the first one is there already)
        page.wait_for_function(
            "(first) => document.querySelector('article')?.textContent !== first"
            " || [...document.querySelectorAll('article')]"
            ".some((a) => a.textContent.includes('Question 0000'))",
            arg=first,
        )
        most = max(most, messages(page).count())
    expect(message(page, "Question 0000")).to_be_visible()
    scrolling: list[float] = page.evaluate("window.__longtasks")
    print(
        f"\n2,002 messages: opened in {opened:.2f} s with {rendered} in the page "
        f"(long tasks {[round(t) for t in opening]} ms); {rounds} scrolls to the start, "
        f"at most {most} in the page; long tasks while scrolling: {len(scrolling)}, "
        f"longest {max(scrolling, default=0):.0f} ms, total {sum(scrolling):.0f} ms"
    )
    assert most <= MOST_RENDERED, f"{most} messages in the page at once: not windowed"
    assert max(opening, default=0) <= OPEN_LIMIT_MS, opening
    assert max(scrolling, default=0) <= LONG_TASK_LIMIT_MS, scrolling
