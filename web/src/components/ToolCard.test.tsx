import { cleanup, fireEvent, render, screen } from "@testing-library/preact";
import { afterEach, describe, expect, test } from "vitest";
import { approvalText, clipText, formatDuration, prettyText, ToolCard, toolCallFromPart } from "./ToolCard";

afterEach(cleanup);

describe("ToolCard", () => {
  test("names the call, pretty-prints JSON arguments and shows the duration", () => {
    render(
      <ToolCard call={{ id: "c1", name: "web_search", arguments: '{"query":"parley","limit":3}', output: "3 results", seconds: 1.26 }} />,
    );
    const card = screen.getByRole("article", { name: "Tool call: web_search" });
    expect(card.querySelector(".tool-name")?.textContent).toBe("web_search");
    expect(card.querySelectorAll("pre")[0]!.textContent).toBe('{\n  "query": "parley",\n  "limit": 3\n}');
    expect(card.textContent).toContain("1.3 s");
    expect(card.textContent).toContain("3 results");
  });

  test("a running call shows a spinner and Running…, and no output yet", () => {
    render(<ToolCard call={{ id: "c1", name: "run_code", arguments: "print(1)", running: true }} />);
    const card = screen.getByRole("article", { name: "Tool call: run_code" });
    expect(card.getAttribute("aria-busy")).toBe("true");
    expect(card.querySelector(".spinner")).not.toBeNull();
    expect(card.textContent).toContain("Running…");
    expect(card.querySelectorAll("pre").length).toBe(1); // arguments (not JSON: as written)
    expect(card.querySelector("pre")?.textContent).toBe("print(1)");
  });

  test("long output is collapsed with Show all / Show less", () => {
    const output = Array.from({ length: 40 }, (_, i) => `line ${i + 1}`).join("\n");
    render(<ToolCard call={{ id: "c1", name: "read", arguments: "{}", output }} />);
    const pre = screen.getByRole("article").querySelectorAll("pre")[1]!;
    expect(pre.textContent).toContain("line 12");
    expect(pre.textContent).not.toContain("line 13");
    const button = screen.getByRole("button", { name: "Show all" });
    expect(button.getAttribute("aria-expanded")).toBe("false");
    fireEvent.click(button);
    expect(pre.textContent).toBe(output);
    expect(screen.getByRole("button", { name: "Show less" }).getAttribute("aria-expanded")).toBe("true");
  });

  test("long output on one line is collapsed by its length", () => {
    expect(clipText("x".repeat(1200))).toBeNull();
    expect(clipText("x".repeat(1201))).toBe(`${"x".repeat(1200)}\n…`);
    expect(clipText(Array(12).fill("a").join("\n"))).toBeNull();
    expect(clipText(Array(13).fill("a").join("\n"))).toBe(`${Array(12).fill("a").join("\n")}\n…`);
  });

  test("an error is marked, in red", () => {
    render(<ToolCard call={{ id: "c1", name: "fetch", arguments: "{}", output: "HTTP 500", isError: true, seconds: 0.2 }} />);
    const card = screen.getByRole("article", { name: "Tool call: fetch" });
    expect(card.classList.contains("error")).toBe(true);
    expect(card.querySelector(".tool-badge.error")?.textContent).toBe("Error");
    expect(card.querySelector("pre.error")?.textContent).toBe("HTTP 500");
  });

  test("every text is text: a name and output full of HTML execute nothing", () => {
    const evil = '<img src=x onerror="alert(1)">';
    render(<ToolCard call={{ id: "c1", name: evil, arguments: evil, output: `<script>alert(1)</script>${evil}` }} />);
    const card = screen.getByRole("article", { name: `Tool call: ${evil}` });
    expect(card.querySelector("img, script")).toBeNull();
    expect(card.querySelector(".tool-name")?.textContent).toBe(evil);
  });

  test("approval outcomes are said in words", () => {
    expect(approvalText({ state: "denied", reason: "too risky" })).toBe("Denied: too risky");
    expect(approvalText({ state: "denied", reason: null })).toBe("Denied");
    expect(approvalText({ state: "denied", reason: "policy" })).toBe("Denied by policy");
    expect(approvalText({ state: "answered" })).toBe("Answered by a person");
    expect(approvalText({ state: "approved" })).toBe("Approved by a person");
    expect(approvalText({ state: "auto" })).toBeNull();
    render(
      <ToolCard call={{ id: "c1", name: "rm", arguments: "{}", output: "denied", isError: true, approval: { state: "denied", reason: "no" } }} />,
    );
    expect(screen.getByText("Denied: no").classList.contains("denied")).toBe(true);
  });

  test("a stored tool_call part becomes a call", () => {
    const call = toolCallFromPart({
      kind: "tool_call",
      id: "call_1",
      name: "kb_search",
      arguments: "{}",
      result: { content: "ok", is_error: false, seconds: 0.5 },
      approval: "answered",
      approval_reason: null,
    });
    expect(call).toEqual({
      id: "call_1",
      name: "kb_search",
      arguments: "{}",
      output: "ok",
      isError: false,
      seconds: 0.5,
      running: false,
      approval: { state: "answered", reason: null },
    });
  });

  test("durations: short ones briefly, a call that never ran without one", () => {
    expect(formatDuration(0.04)).toBe("<0.1 s");
    expect(formatDuration(0.44)).toBe("0.4 s");
    expect(formatDuration(75)).toBe("1 min 15 s");
    render(<ToolCard call={{ id: "c", name: "x", arguments: "", output: "no", seconds: 0, approval: { state: "denied" } }} />);
    expect(screen.getByRole("article").querySelector(".tool-time")).toBeNull();
  });

  test("prettyText leaves what is not JSON alone", () => {
    expect(prettyText("[1,2]")).toBe("[\n  1,\n  2\n]");
    expect(prettyText("{not json")).toBe("{not json");
    expect(prettyText("plain")).toBe("plain");
  });
});
