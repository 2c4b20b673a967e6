"""Tool calls in the browser: the model calls ``workspace_write`` twice, both wait for a
person (``tools.approval: {workspace_write: ask}``); one is approved, the other denied
with a reason, and the turn resumes and streams on in place. The cards (name,
arguments, state, output) are what a reload shows too."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Locator, Page, expect

from parley.testing.mock_openai import MockOpenAI
from tests.support.server import ParleyServer
from tests.web.ui import (
    assert_same_after_reload,
    message,
    screenshot,
    send,
    wait_until_idle,
)

KEEP = json.dumps({"path": "keep.txt", "content": "worth keeping"})
DROP = json.dumps({"path": "drop.txt", "content": "not wanted"})


def card(page: Page, text: str) -> Locator:
    """The approval card of the call whose arguments hold ``text``."""
    return page.get_by_role("article", name="Approval needed: workspace_write").filter(
        has_text=text
    )


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"] if isinstance(m["content"], str) else json.dumps(m)
        for m in request["messages"]
        if m["role"] == "tool"
    }


def test_approve_one_call_and_deny_another(
    page: Page, upstream: MockOpenAI, server: ParleyServer
) -> None:
    upstream.queue_tool_calls(
        [("call_keep", "workspace_write", KEEP), ("call_drop", "workspace_write", DROP)]
    )
    upstream.queue_text("I wrote keep.txt; drop.txt was declined.", delay=0.05)
    page.goto("/")
    send(page, "Write two files")

    keep = card(page, "keep.txt")
    drop = card(page, "drop.txt")
    expect(keep.get_by_role("button", name="Approve")).to_be_visible()
    expect(drop.get_by_role("button", name="Approve")).to_be_visible()
    expect(keep).to_contain_text("workspace_write")
    wait_until_idle(page)
    screenshot(page, "approval-waiting")
    # a reload shows the calls still waiting, with their buttons
    assert_same_after_reload(page)
    keep = card(page, "keep.txt")
    drop = card(page, "drop.txt")

    keep.get_by_role("button", name="Approve").click()
    drop.get_by_role("button", name="Deny").click()
    # deny with a reason: the model is told why
    drop.get_by_role("textbox", name="Reason (optional)").fill("not that file")
    drop.get_by_role("button", name="Deny").click()

    expect(message(page, "drop.txt was declined")).to_be_visible()
    wait_until_idle(page)
    results = tool_results(upstream.requests[-1])
    assert set(results) == {"call_keep", "call_drop"}, results
    assert "keep.txt" in results["call_keep"], results
    assert "not that file" in results["call_drop"], results
    written = list((server.data_dir / "workspaces").rglob("keep.txt"))
    assert [path.read_text() for path in written] == ["worth keeping"]
    assert not list((server.data_dir / "workspaces").rglob("drop.txt"))
    # both calls stay in the reply as cards: one ran, one was denied with its reason
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    reply = message(page, "drop.txt was declined")
    cards = reply.get_by_role("article", name="Tool call: workspace_write")
    expect(cards).to_have_count(2)
    expect(cards.filter(has_text="keep.txt")).to_contain_text("Approved by a person")
    expect(cards.filter(has_text="drop.txt")).to_contain_text("Denied: not that file")
    screenshot(page, "chat-tool-cards")
    assert_same_after_reload(page)
    reply = message(page, "drop.txt was declined")
    expect(reply.get_by_role("article", name="Tool call: workspace_write")).to_have_count(2)
