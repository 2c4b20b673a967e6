"""What a model, a tool, a document or a person writes is never run by the page: a reply,
its reasoning, a tool's name, arguments and output, a document's file name, a
conversation's title and a user's message all carry ``<img src=x onerror=...>`` and
``javascript:`` links; nothing runs (``window.__pwned`` stays unset, no dialog opens),
no ``javascript:`` link exists, and no element carries an event handler attribute.

The page's CSP would block an inline handler that slipped through (the fixture fails
the test on the console's CSP report): the checks of the DOM are what show the
sanitiser itself works."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from parley.testing.mock_openai import MockOpenAI, chunk, sse, usage
from tests.support.server import ParleyServer
from tests.web.ui import (
    PAYLOAD,
    api,
    choose_knowledge_base,
    conversation_id,
    message,
    send,
    wait_until_idle,
)

HOSTILE_MARKDOWN = f"""Here is what you asked for.

{PAYLOAD}

[click me](javascript:window.__pwned=2) and [click me too](JaVaScRiPt:window.__pwned=3)
and [spaced]( javascript:window.__pwned=4 ) and <javascript:window.__pwned=5>.

<a href="javascript:window.__pwned=6">raw link</a>
<a href="&#106;avascript:window.__pwned=7">entity link</a>
<a href="data:text/html,<script>window.__pwned=8</script>">data link</a>
<script>window.__pwned=9</script>
<svg><script>window.__pwned=10</script><animate onbegin="window.__pwned=11"/></svg>
<iframe src="javascript:window.__pwned=12"></iframe>
<form action="javascript:window.__pwned=13"><button>form button</button></form>
<details open ontoggle="window.__pwned=14"><summary>details</summary></details>
<math><mtext><table><mglyph><style><img src=x onerror="window.__pwned=15">

![picture](x" onerror="window.__pwned=16)

Inline code keeps it as text: `{PAYLOAD}`

```html
{PAYLOAD}
<script>window.__pwned=17</script>
```

| column | {PAYLOAD} |
|---|---|
| <img src=x onerror=window.__pwned=18> | [cell](javascript:window.__pwned=19) |

The end of the hostile reply.
"""

CHECK_PAGE = """() => {
  const bad = [];
  for (const a of document.querySelectorAll('a[href], area[href]')) {
    const href = a.getAttribute('href').replace(/[\\s\\u0000-\\u001f]/g, '').toLowerCase();
    if (href.startsWith('javascript:') || href.startsWith('data:') || href.startsWith('vbscript:'))
      bad.push('link ' + a.outerHTML.slice(0, 120));
  }
  for (const el of document.querySelectorAll('*')) {
    for (const attr of el.attributes) {
      if (attr.name.toLowerCase().startsWith('on'))
        bad.push('handler ' + el.outerHTML.slice(0, 120));
      if (/^\\s*javascript:/i.test(attr.value) && ['src', 'action', 'formaction', 'xlink:href',
          'href', 'data'].includes(attr.name.toLowerCase()))
        bad.push('url ' + el.outerHTML.slice(0, 120));
    }
  }
  for (const s of document.querySelectorAll('script')) {
    if (!s.src) bad.push('inline script ' + s.outerHTML.slice(0, 120));
  }
  for (const f of document.querySelectorAll('iframe, object, embed'))
    bad.push(f.outerHTML.slice(0, 120));
  return { pwned: window.__pwned, bad };
}"""


def assert_nothing_ran(page: Page) -> None:
    # images settle (an onerror would have fired) before looking
    page.wait_for_function("[...document.images].every((image) => image.complete)")
    found: dict[str, Any] = page.evaluate(CHECK_PAGE)
    assert found["pwned"] is None, f"injected script ran: window.__pwned = {found['pwned']}"
    assert not found["bad"], found["bad"]


def split(text: str, size: int) -> list[str]:
    """Pieces cut at every ``size`` characters (inside tags too: a reply rendered as it
    streams must be safe at every point)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_a_hostile_reply_and_reasoning_run_nothing(page: Page, upstream: MockOpenAI) -> None:
    frames = [sse(chunk({"role": "assistant", "content": ""}))]
    frames += [sse(chunk({"reasoning_content": p})) for p in split(f"Thinking {PAYLOAD} ", 5)]
    frames += [sse(chunk({"content": p})) for p in split(HOSTILE_MARKDOWN, 7)]
    frames += [sse(chunk({}, "stop")), sse(usage(10, 10)), b"data: [DONE]\n\n"]
    upstream.queue_raw(frames, delay=0.002)
    page.goto("/")
    send(page, f"{PAYLOAD} please [x](javascript:window.__pwned=20)")
    reply = message(page, "The end of the hostile reply.")
    expect(reply).to_be_visible()
    wait_until_idle(page)
    assert_nothing_ran(page)
    # what was meant as text shows as text
    expect(reply.locator("code").filter(has_text=PAYLOAD).first).to_be_visible()
    expect(message(page, f"{PAYLOAD} please").first).to_be_visible()
    # the links that were javascript: are dead text now; clicking them runs nothing
    for name in ("click me", "click me too", "raw link", "entity link", "cell"):
        target = reply.get_by_text(name, exact=True)
        if target.count():
            target.first.click()
    assert_nothing_ran(page)
    page.reload()
    expect(message(page, "The end of the hostile reply.")).to_be_visible()
    assert_nothing_ran(page)


def test_a_hostile_tool_call_runs_nothing(page: Page, upstream: MockOpenAI) -> None:
    upstream.queue_tool_calls(
        [
            ("call_name", PAYLOAD, json.dumps({"q": PAYLOAD})),
            ("call_args", "workspace_write", json.dumps({"path": "x.txt", "content": PAYLOAD})),
        ]
    )
    page.goto("/")
    send(page, "Call some tools")
    # the unknown tool failed (its output names it); the other one waits for approval
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    wait_until_idle(page)
    assert_nothing_ran(page)
    expect(page.get_by_text(PAYLOAD).first).to_be_attached()
    upstream.queue_text("Done with the tools.")
    page.get_by_role("button", name="Deny").click()
    reason = page.get_by_role("textbox", name="Reason")
    if reason.count():
        reason.fill(PAYLOAD)
        page.get_by_role("button", name="Deny").last.click()
    expect(message(page, "Done with the tools.")).to_be_visible()
    wait_until_idle(page)
    assert_nothing_ran(page)
    page.reload()
    expect(message(page, "Done with the tools.")).to_be_visible()
    assert_nothing_ran(page)


@pytest.fixture(scope="module")
def hostile_base(server: ParleyServer, key: str) -> dict[str, Any]:
    """A base named with markup, holding a document whose file name is the payload."""
    with api(server, key) as client:
        created = client.post(
            "/knowledge_bases",
            json={"name": "hostile-base", "description": f"{PAYLOAD} [d](javascript:alert(1))"},
        )
        assert created.status_code == 200, created.text
        base: dict[str, Any] = created.json()
        uploaded = client.post(
            f"/knowledge_bases/{base['id']}/documents",
            files=[
                (
                    "files",
                    (f"{PAYLOAD}.txt", b"The quokka smiles at every visitor.\n", "text/plain"),
                )
            ],
        )
        assert uploaded.status_code == 202, uploaded.text
        deadline = time.monotonic() + 30
        while True:
            listed = client.get(f"/knowledge_bases/{base['id']}/documents").json()["data"]
            if [d["status"] for d in listed] == ["ready"]:
                return base
            assert time.monotonic() < deadline, listed
            time.sleep(0.1)  # indexing runs in the server's background queue


def test_a_hostile_document_name_runs_nothing(
    page: Page, upstream: MockOpenAI, hostile_base: dict[str, Any]
) -> None:
    page.goto(f"/kb/{hostile_base['id']}")
    documents = page.get_by_role("table", name="Documents of this knowledge base")
    expect(documents).to_contain_text(PAYLOAD)
    expect(documents).to_contain_text("Indexed")
    assert_nothing_ran(page)
    page.get_by_label("Search this knowledge base").fill("quokka smiles")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.get_by_text("The quokka smiles").first).to_be_visible()
    assert_nothing_ran(page)
    page.goto("/kb")
    expect(page.get_by_role("link", name="hostile-base")).to_be_visible()
    assert_nothing_ran(page)

    # cited in a chat: the source list shows the name as text
    upstream.queue_text("The quokka smiles [1].")
    page.goto("/")
    choose_knowledge_base(page, "hostile-base")
    send(page, "Does the quokka smile at visitors?")
    reply = message(page, "The quokka smiles")
    expect(reply).to_be_visible()
    wait_until_idle(page)
    expect(reply).to_contain_text(PAYLOAD)
    assert_nothing_ran(page)


def test_a_hostile_title_runs_nothing(
    page: Page, upstream: MockOpenAI, server: ParleyServer, key: str
) -> None:
    upstream.queue_text("Fine.")
    page.goto("/")
    send(page, "A title to be renamed")
    expect(message(page, "Fine.")).to_be_visible()
    wait_until_idle(page)
    cid = conversation_id(page)
    with api(server, key) as client:
        renamed = client.patch(f"/conversations/{cid}", json={"title": PAYLOAD})
        assert renamed.status_code == 200, renamed.text
    page.reload()
    expect(page.get_by_role("link", name=PAYLOAD, exact=True)).to_be_visible()
    assert_nothing_ran(page)
    # a deep link to a conversation id that is markup is a readable "not found"
    page.goto("/c/" + quote(PAYLOAD, safe=""))
    page.wait_for_load_state("networkidle")
    assert_nothing_ran(page)
