"""Knowledge bases in the browser: create one, upload a document, watch it index, search
it, then ask in a chat with the base chosen and follow the answer's citation to the
passage and the document."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from parley.testing.mock_openai import MockOpenAI
from tests.web.ui import (
    assert_same_after_reload,
    choose_knowledge_base,
    create_knowledge_base,
    message,
    screenshot,
    send,
    upload,
    wait_until_idle,
)

GUIDE = """# Parley field guide

## Volcanoes

The zorbulite crystal forms only inside cooling basalt vents on the island of Quenmar.
Miners there carry copper lanterns because zorbulite glows green near copper.

## Rivers

The river Ostravel floods every ninth spring, and the farmers plant marrowgrass after.
"""


def test_upload_index_ask_and_open_the_citation(page: Page, upstream: MockOpenAI) -> None:
    page.goto("/kb")
    create_knowledge_base(page, "field-guide")
    upload(page, "guide.md", GUIDE, "text/markdown")
    documents = page.get_by_role("table", name="Documents of this knowledge base")
    row = documents.get_by_role("row").filter(has_text="guide.md")
    expect(row).to_contain_text("Indexed")
    page.reload()
    expect(
        page.get_by_role("table", name="Documents of this knowledge base")
        .get_by_role("row")
        .filter(has_text="guide.md")
    ).to_contain_text("Indexed")

    # the base's own search: hybrid results with scores
    page.get_by_label("Search this knowledge base").fill("zorbulite copper lanterns")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.get_by_text("zorbulite glows green near copper").first).to_be_visible()
    expect(page.get_by_text(re.compile(r"Score \d")).first).to_be_visible()
    screenshot(page, "knowledge-base")

    # a chat with the base chosen: the model searches it, then answers citing [1]
    upstream.queue_tool_calls(
        [("call_search", "kb_search", json.dumps({"query": "zorbulite copper lanterns"}))]
    )
    upstream.queue_text("Zorbulite glows green near copper [1], so miners carry copper lanterns.")
    page.goto("/")
    choose_knowledge_base(page, "field-guide")
    send(page, "Why do miners carry copper lanterns near zorbulite?")
    reply = message(page, "glows green near copper")
    expect(reply).to_be_visible()
    wait_until_idle(page)
    sent = upstream.requests[0]
    system = sent["messages"][0]["content"]
    assert "<knowledge_context>" in (system if isinstance(system, str) else json.dumps(system))
    # the tool card of the search, and the sources
    expect(reply).to_contain_text("kb_search")
    expect(reply).to_contain_text("guide.md")
    screenshot(page, "chat-citations")

    # the marker leads to its source: file, section and the exact passage sent
    reply.get_by_role("link", name="Source 1").first.click()
    source = reply.get_by_role("region", name="Sources").get_by_role("listitem").first
    expect(source).to_be_focused()
    expect(source).to_contain_text("guide.md")
    expect(source).to_contain_text("Volcanoes")
    source.get_by_text("Passage sent to the model").click()
    expect(source.get_by_text("zorbulite glows green near copper")).to_be_visible()
    # "Open document" opens it in a new tab (a Markdown file downloads there), with the
    # page's own session and no window.opener
    link = source.get_by_role("link", name="Open document: guide.md")
    assert link.get_attribute("target") == "_blank"
    assert set((link.get_attribute("rel") or "").split()) >= {"noopener", "noreferrer"}
    with page.expect_popup():
        link.click()
    href = link.get_attribute("href") or ""
    document = page.request.get(href)
    assert document.status == 200, document.text()
    assert "marrowgrass" in document.text()
    assert_same_after_reload(page)
