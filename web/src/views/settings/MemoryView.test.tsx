import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { setLang } from "../../i18n";
import { fakeApi, HOSTILE, list } from "./fakeApi";
import { memoryQuery, MemoryView, scopeId, shortText } from "./MemoryView";
import type { MemoryRecord } from "./types";

function memory(overrides: Partial<MemoryRecord> = {}): MemoryRecord {
  return {
    id: "mem_1",
    object: "memory",
    text: "Prefers tea",
    assistant_id: null,
    source: "api",
    conversation_id: null,
    created_at: 1_700_000_000,
    updated_at: 1_700_000_000,
    ...overrides,
  };
}

beforeEach(() => setLang("en"));
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("memory helpers", () => {
  it("filters as the API allows: all, global, or one assistant", () => {
    expect(memoryQuery("all")).toEqual({});
    expect(memoryQuery("global")).toEqual({ scope: "global" });
    expect(memoryQuery("asst_1")).toEqual({ assistant_id: "asst_1" });
    expect(scopeId("all")).toBeNull();
    expect(scopeId("global")).toBeNull();
    expect(scopeId("asst_1")).toBe("asst_1");
    expect(shortText("a\n b   c")).toBe("a b c");
    expect(shortText("x".repeat(50))).toBe(`${"x".repeat(39)}…`);
  });
});

describe("MemoryView", () => {
  it("renders hostile memory text and assistant names as text", async () => {
    fakeApi({
      "GET /v1/assistants": list([{ id: "asst_1", name: HOSTILE }]),
      "GET /v1/memories": list([memory({ text: HOSTILE, assistant_id: "asst_1", source: "<b>tool</b>" })]),
    });
    const { container } = render(<MemoryView />);
    const text = await screen.findByText(HOSTILE, { selector: ".memory-text" });
    expect(text.textContent).toBe(HOSTILE);
    await screen.findByText(`Assistant: ${HOSTILE}`, { selector: ".card-meta span" });
    expect(container.querySelector("img, script, b")).toBeNull();
  });

  it("filters by assistant, searches that scope, and shows scores", async () => {
    const api = fakeApi({
      "GET /v1/assistants": list([{ id: "asst_1", name: "Coach" }]),
      "GET /v1/memories": (r) => list(r.query.get("assistant_id") ? [memory({ id: "mem_2", text: "Runs 5k", assistant_id: "asst_1" })] : [memory()]),
      "POST /v1/memories/search": { object: "list", data: [{ ...memory({ id: "mem_2", text: "Runs 5k", assistant_id: "asst_1" }), score: 0.0312 }] },
    });
    render(<MemoryView />);
    await screen.findByText("Prefers tea");
    await screen.findAllByRole("option", { name: "Assistant: Coach" });
    fireEvent.change(screen.getByLabelText("Show"), { target: { value: "asst_1" } });
    await screen.findByText("Runs 5k");
    expect(api.last("GET", "/v1/memories")?.query.get("assistant_id")).toBe("asst_1");

    fireEvent.input(screen.getByLabelText("Search memories"), { target: { value: "running" } });
    fireEvent.click(screen.getByRole("button", { name: "Search" }));
    await screen.findByText("score 0.031");
    expect(api.last("POST", "/v1/memories/search")?.body).toEqual({ query: "running", assistant_id: "asst_1", limit: 20 });
    fireEvent.click(screen.getByRole("button", { name: "Clear search" }));
    expect(screen.queryByText("score 0.031")).toBeNull();
  });

  it("edits inline, deletes after confirmation, and adds one", async () => {
    const api = fakeApi({
      "GET /v1/assistants": list([]),
      "GET /v1/memories": list([memory()]),
      "PATCH /v1/memories/mem_1": (r) => memory({ text: (r.body as { text: string }).text }),
      "DELETE /v1/memories/mem_1": { id: "mem_1", object: "memory.deleted", deleted: true },
      "POST /v1/memories": (r) => ({ ...memory({ id: "mem_9", text: (r.body as { text: string }).text }) }),
    });
    render(<MemoryView />);
    fireEvent.click(await screen.findByRole("button", { name: "Edit memory “Prefers tea”" }));
    const box = screen.getByLabelText("Memory text");
    fireEvent.input(box, { target: { value: "Prefers green tea" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await screen.findByText("Prefers green tea");
    expect(api.last("PATCH", "/v1/memories/mem_1")?.body).toEqual({ text: "Prefers green tea" });

    fireEvent.click(screen.getByText("Add a memory"));
    fireEvent.input(screen.getByLabelText("New memory"), { target: { value: "Lives in Lyon" } });
    fireEvent.click(screen.getByRole("button", { name: "Add memory" }));
    await screen.findByText("Lives in Lyon");
    expect(api.last("POST", "/v1/memories")?.body).toEqual({ text: "Lives in Lyon", assistant_id: null });

    fireEvent.click(screen.getByRole("button", { name: "Delete memory “Prefers green tea”" }));
    fireEvent.click(within(screen.getByRole("dialog")).getByRole("button", { name: "Delete" }));
    await waitFor(() => expect(screen.queryByText("Prefers green tea")).toBeNull());
    expect(api.last("DELETE", "/v1/memories/mem_1")).toBeTruthy();
  });
});
