import { act, cleanup, fireEvent, render, screen } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { KnowledgeView } from "./KnowledgeView";
import { base, doc, fakeServer } from "./testkit";

const HOSTILE = `<img src=x onerror=alert(1)>`;

let server: ReturnType<typeof fakeServer>;

beforeEach(() => {
  vi.useFakeTimers();
  server = fakeServer();
  vi.stubGlobal("fetch", vi.fn(server.fetch));
  // happy-dom may lack a modal dialog; the views only need it to open
  if (!HTMLDialogElement.prototype.showModal) {
    HTMLDialogElement.prototype.showModal = function (this: HTMLDialogElement) {
      this.setAttribute("open", "");
    };
  }
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

/** Let the fake server answer and the page render. */
const settle = async (ms = 0) => {
  // act() runs Preact's effects at once (they otherwise wait for a frame)
  const advance = (by: number) => async () => {
    await vi.advanceTimersByTimeAsync(by);
  };
  await act(advance(ms));
  for (let i = 0; i < 10; i++) await act(advance(0));
};

describe("the list of knowledge bases", () => {
  it("shows each base with its documents and status, names as text", async () => {
    server.bases = [base({ id: "kb_1", name: HOSTILE, description: `<b>bold</b>`, documents: 3 })];
    server.docs.kb_1 = [
      doc({ id: "d1" }),
      doc({ id: "d2", status: "failed", error: "x" }),
      doc({ id: "d3", status: "indexing", chunks_total: 5, chunks_done: 1 }),
    ];
    const { container } = render(<KnowledgeView kbId={null} />);
    await settle();
    const link = screen.getByRole("link", { name: HOSTILE });
    expect(link.getAttribute("href")).toBe("/kb/kb_1");
    expect(screen.getByText(`<b>bold</b>`)).toBeTruthy();
    expect(container.querySelector("img")).toBeNull();
    expect(container.querySelector("b")).toBeNull();
    expect(screen.getByText("Indexing: 2 of 3 done · 1 failed")).toBeTruthy();
    expect(screen.getByRole("button", { name: `Rename: ${HOSTILE}` })).toBeTruthy();
    expect(screen.getByRole("button", { name: `Delete: ${HOSTILE}` })).toBeTruthy();
  });

  it("creates a base, showing the server's refusal readably", async () => {
    server.errors["POST /v1/knowledge_bases"] = [
      409,
      { error: { message: "a knowledge base named 'handbook' already exists", code: "conflict" } },
    ];
    render(<KnowledgeView kbId={null} />);
    await settle();
    expect(screen.getByText(/No knowledge bases yet/)).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "New knowledge base" }));
    fireEvent.input(screen.getByLabelText("Name"), { target: { value: "handbook" } });
    fireEvent.input(screen.getByLabelText("Description"), { target: { value: "HR" } });
    fireEvent.click(screen.getByRole("button", { name: "Create" }));
    await settle();
    expect(screen.getByRole("alert").textContent).toContain(
      "a knowledge base named 'handbook' already exists",
    );
    const post = server.calls.find((c) => c.method === "POST")!;
    expect(post.body).toEqual({ name: "handbook", description: "HR" });
  });

  it("deletes a base after confirming", async () => {
    server.bases = [base({ id: "kb_1", name: "old" })];
    render(<KnowledgeView kbId={null} />);
    await settle();
    fireEvent.click(screen.getByRole("button", { name: "Delete: old" }));
    fireEvent.click(screen.getAllByRole("button", { name: "Delete" }).at(-1)!);
    await settle();
    expect(server.count("DELETE", "/kb_1")).toBe(1);
    expect(screen.queryByRole("link", { name: "old" })).toBeNull();
  });
});

describe("a knowledge base's page", () => {
  it("renders a hostile file name, reason and passage as text, never HTML", async () => {
    server.bases = [base({ id: "kb_1", name: "handbook" })];
    server.docs.kb_1 = [
      doc({ id: "d1", filename: HOSTILE, status: "failed", error: `cannot read ${HOSTILE}` }),
      doc({ id: "d2", filename: "ok.md" }),
    ];
    server.hits = [
      {
        rank: 1,
        score: 0.032787,
        chunk_id: "7",
        knowledge_base_id: "kb_1",
        knowledge_base: "handbook",
        document_id: "d1",
        filename: HOSTILE,
        title: null,
        page: 4,
        section: "Leave > Parental",
        text: `Parental leave is <script>alert(1)</script> 16 weeks`,
      },
    ];
    const { container } = render(<KnowledgeView kbId="kb_1" />);
    await settle();
    expect(screen.getByText(HOSTILE)).toBeTruthy();
    expect(screen.getByText(`Reason: cannot read ${HOSTILE}`)).toBeTruthy();
    const open = screen.getByRole("link", { name: `Open: ${HOSTILE}` });
    expect(open.getAttribute("href")).toBe("/v1/knowledge_bases/kb_1/documents/d1/content");
    expect(open.getAttribute("target")).toBe("_blank");
    expect(open.getAttribute("rel")).toBe("noopener noreferrer");

    fireEvent.input(screen.getByRole("searchbox", { name: "Search this knowledge base" }), {
      target: { value: "parental leave" },
    });
    fireEvent.click(screen.getByRole("button", { name: "Search" }));
    await settle();
    expect(screen.getByText(`Parental leave is <script>alert(1)</script> 16 weeks`)).toBeTruthy();
    expect(screen.getByText("#1")).toBeTruthy();
    expect(screen.getByText("Score 0.0328")).toBeTruthy();
    expect(screen.getByText("Page 4")).toBeTruthy();
    expect(screen.getByText("Section: Leave > Parental")).toBeTruthy();
    expect(container.querySelector("img, script")).toBeNull();
    expect(server.calls.find((c) => c.path.endsWith("/search"))!.body).toMatchObject({
      query: "parental leave",
    });
  });

  it("shows progress per file and for the base, and polls only while indexing", async () => {
    server.bases = [base({ id: "kb_1" })];
    server.docs.kb_1 = [
      doc({ id: "d1", filename: "done.md", chunks_total: 4, chunks_done: 4 }),
      doc({ id: "d2", filename: "big.pdf", status: "indexing", chunks_total: 10, chunks_done: 3 }),
      doc({ id: "d3", filename: "next.md", status: "queued", chunks_total: null, chunks_done: 0 }),
    ];
    render(<KnowledgeView kbId="kb_1" />);
    await settle();
    const file = screen.getByRole("progressbar", { name: "Indexing progress of big.pdf" }) as HTMLProgressElement;
    expect(file.max).toBe(10);
    expect(file.value).toBe(3);
    expect(screen.getByText("3 / 10 chunks")).toBeTruthy();
    const whole = screen.getByRole("progressbar", { name: "Knowledge base indexing progress" }) as HTMLProgressElement;
    expect(whole.max).toBe(3);
    expect(whole.value).toBeCloseTo(1.3);
    expect(screen.getByRole("button", { name: "Cancel: big.pdf" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Cancel: next.md" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Re-index: done.md" })).toBeTruthy();

    const lists = () => server.count("GET", "/documents");
    const first = lists();
    server.docs.kb_1 = server.docs.kb_1.map((d) => ({
      ...d,
      status: "ready",
      chunks_done: d.chunks_total ?? 2,
      chunks_total: d.chunks_total ?? 2,
      updated_at: 9,
    }));
    await settle(1000);
    expect(lists()).toBe(first + 1);
    expect(screen.queryByRole("button", { name: "Cancel: big.pdf" })).toBeNull();
    expect((screen.getByRole("progressbar", { name: "Knowledge base indexing progress" }) as HTMLProgressElement).value).toBe(3);
    await settle(10_000);
    expect(lists()).toBe(first + 1); // done: no more polling
  });

  it("stops polling when the view goes away", async () => {
    server.bases = [base({ id: "kb_1" })];
    server.docs.kb_1 = [doc({ id: "d1", status: "indexing", chunks_total: 100, chunks_done: 1 })];
    const view = render(<KnowledgeView kbId="kb_1" />);
    await settle();
    await settle(1000);
    const seen = server.count("GET", "/documents");
    expect(seen).toBeGreaterThanOrEqual(2);
    view.unmount();
    await settle(10_000);
    expect(server.count("GET", "/documents")).toBe(seen);
  });

  it("cancels, re-indexes and deletes a document", async () => {
    server.bases = [base({ id: "kb_1" })];
    server.docs.kb_1 = [
      doc({ id: "d1", filename: "a.md", status: "indexing", chunks_total: 8, chunks_done: 2 }),
      doc({ id: "d2", filename: "b.md" }),
    ];
    render(<KnowledgeView kbId="kb_1" />);
    await settle();
    fireEvent.click(screen.getByRole("button", { name: "Cancel: a.md" }));
    await settle();
    expect(server.count("POST", "/d1/cancel")).toBe(1);
    expect(screen.getByText("Cancelled")).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Re-index: a.md" }));
    await settle();
    expect(server.count("POST", "/d1/reindex")).toBe(1);
    fireEvent.click(screen.getByRole("button", { name: "Delete: b.md" }));
    fireEvent.click(screen.getAllByRole("button", { name: "Delete" }).at(-1)!);
    await settle();
    expect(server.count("DELETE", "/documents/d2")).toBe(1);
    expect(screen.queryByText("b.md")).toBeNull();
  });

  it("has labelled upload buttons and file inputs", async () => {
    server.bases = [base({ id: "kb_1" })];
    const { container } = render(<KnowledgeView kbId="kb_1" />);
    await settle();
    expect(screen.getByRole("button", { name: "Upload files" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Upload folder" })).toBeTruthy();
    const inputs = container.querySelectorAll<HTMLInputElement>("input[type=file]");
    expect([...inputs].map((i) => i.getAttribute("aria-label"))).toEqual(["Upload files", "Upload folder"]);
    expect(inputs[0].multiple).toBe(true);
    const folder = inputs[1] as HTMLInputElement & { webkitdirectory?: boolean };
    expect(folder.webkitdirectory === true || folder.hasAttribute("webkitdirectory")).toBe(true);
  });

  it("says so when the base does not exist", async () => {
    render(<KnowledgeView kbId="kb_gone" />);
    await settle();
    expect(screen.getByRole("alert").textContent).toContain("knowledge base 'kb_gone' not found");
    expect(screen.getByRole("link", { name: /All knowledge bases/ })).toBeTruthy();
  });
});
