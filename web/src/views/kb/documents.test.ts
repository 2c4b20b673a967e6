import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { DocumentsStore, isBusy, mergeRefresh } from "./documents";
import { base, doc, fakeServer } from "./testkit";

let server: ReturnType<typeof fakeServer>;

beforeEach(() => {
  vi.useFakeTimers();
  server = fakeServer();
  server.bases = [base()];
  vi.stubGlobal("fetch", vi.fn(server.fetch));
});
afterEach(() => {
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

const listCalls = () => server.count("GET", "/documents");

describe("DocumentsStore polling", () => {
  it("polls every second while a document indexes, and stops once all are done", async () => {
    server.docs.kb_1 = [
      doc({ id: "d1", status: "ready" }),
      doc({ id: "d2", status: "indexing", chunks_done: 1, chunks_total: 4 }),
    ];
    const store = new DocumentsStore("kb_1", 1000);
    await store.load();
    expect(store.polling).toBe(true);
    expect(listCalls()).toBe(1);

    server.docs.kb_1[1] = { ...server.docs.kb_1[1], chunks_done: 3, updated_at: 2 };
    await vi.advanceTimersByTimeAsync(1000);
    expect(listCalls()).toBe(2);
    expect(store.state.value.docs[1].chunks_done).toBe(3);

    server.docs.kb_1[1] = { ...server.docs.kb_1[1], status: "ready", chunks_done: 4, updated_at: 3 };
    await vi.advanceTimersByTimeAsync(1000);
    expect(store.state.value.docs[1].status).toBe("ready");
    expect(store.state.value.counts).toEqual({ ready: 2 });
    expect(isBusy(store.state.value)).toBe(false);
    expect(store.polling).toBe(false);

    const before = listCalls();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(listCalls()).toBe(before); // no request once nothing is pending
    store.dispose();
  });

  it("does not poll a base with nothing pending", async () => {
    server.docs.kb_1 = [doc({ id: "d1" })];
    const store = new DocumentsStore("kb_1");
    await store.load();
    expect(store.polling).toBe(false);
    await vi.advanceTimersByTimeAsync(5000);
    expect(listCalls()).toBe(1);
    store.dispose();
  });

  it("stops polling when disposed (the view unmounted)", async () => {
    server.docs.kb_1 = [doc({ id: "d1", status: "queued", chunks_total: null, chunks_done: 0 })];
    const store = new DocumentsStore("kb_1");
    await store.load();
    await vi.advanceTimersByTimeAsync(1000);
    expect(listCalls()).toBe(2);
    store.dispose();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(listCalls()).toBe(2);
    expect(store.polling).toBe(false);
  });

  it("re-reads only from the first pending document on", async () => {
    server.docs.kb_1 = [
      doc({ id: "d1" }),
      doc({ id: "d2" }),
      doc({ id: "d3", status: "indexing", chunks_done: 0, chunks_total: 2 }),
    ];
    const store = new DocumentsStore("kb_1");
    await store.load();
    await vi.advanceTimersByTimeAsync(1000);
    const poll = server.calls.filter((c) => c.path.endsWith("/documents")).at(-1)!;
    expect(poll.query.get("after")).toBe("d2");
    expect(store.state.value.docs.map((d) => d.id)).toEqual(["d1", "d2", "d3"]);
    store.dispose();
  });

  it("stops on a final error (the base was deleted) and shows it", async () => {
    server.docs.kb_1 = [doc({ id: "d1", status: "queued" })];
    const store = new DocumentsStore("kb_1");
    await store.load();
    server.bases = [];
    await vi.advanceTimersByTimeAsync(1000);
    expect(store.polling).toBe(false);
    expect(String(store.state.value.pollError)).toContain("not found");
    await vi.advanceTimersByTimeAsync(20_000);
    expect(listCalls()).toBe(2);
    store.dispose();
  });

  it("shows uploaded documents at once and polls them until indexed", async () => {
    server.docs.kb_1 = [doc({ id: "d1" })];
    const store = new DocumentsStore("kb_1");
    await store.load();
    expect(store.polling).toBe(false);
    const queued = doc({ id: "d2", filename: "new.md", status: "queued", chunks_total: null, chunks_done: 0 });
    server.docs.kb_1.push(queued);
    store.addQueued([queued]);
    expect(store.state.value.docs.map((d) => d.id)).toEqual(["d1", "d2"]);
    expect(store.state.value.counts).toEqual({ ready: 1, queued: 1 }); // the old counts plus the new
    expect(store.polling).toBe(true);
    server.docs.kb_1[1] = { ...queued, status: "ready", chunks_done: 1, chunks_total: 1, updated_at: 5 };
    await vi.advanceTimersByTimeAsync(1000);
    expect(store.state.value.docs[1].status).toBe("ready");
    expect(store.polling).toBe(false);
    store.dispose();
  });

  it("cancels, re-indexes (polling again) and deletes", async () => {
    server.docs.kb_1 = [doc({ id: "d1" }), doc({ id: "d2", status: "indexing", chunks_total: 9, chunks_done: 1 })];
    const store = new DocumentsStore("kb_1");
    await store.load();
    await store.cancel("d2");
    expect(store.state.value.docs[1].status).toBe("cancelled");
    expect(store.state.value.counts).toMatchObject({ indexing: 0, cancelled: 1 });
    await vi.advanceTimersByTimeAsync(1000); // the poll running sees nothing pending and ends
    expect(store.polling).toBe(false);
    await store.reindex("d2");
    expect(store.state.value.docs[1].status).toBe("queued");
    expect(store.polling).toBe(true);
    await store.remove("d1");
    expect(store.state.value.docs.map((d) => d.id)).toEqual(["d2"]);
    store.dispose();
  });

  it("re-index all queues every document and polls", async () => {
    server.docs.kb_1 = [doc({ id: "d1" }), doc({ id: "d2", status: "failed", error: "bad" })];
    const store = new DocumentsStore("kb_1");
    await store.load();
    expect(await store.reindexAll()).toBe(2);
    expect(store.state.value.docs.every((d) => d.status === "queued")).toBe(true);
    expect(store.polling).toBe(true);
    store.dispose();
  });

  it("loads more pages on demand past the first thousand", async () => {
    server.docs.kb_1 = Array.from({ length: 1050 }, (_, i) => doc({ id: `d${String(i).padStart(4, "0")}` }));
    const store = new DocumentsStore("kb_1");
    await store.load();
    expect(store.state.value.docs).toHaveLength(1000);
    expect(store.state.value.hasMore).toBe(true);
    await store.loadMore();
    expect(store.state.value.docs).toHaveLength(1050);
    expect(store.state.value.hasMore).toBe(false);
    store.dispose();
  });
});

describe("mergeRefresh", () => {
  it("keeps documents added and newer versions made meanwhile, drops those deleted", () => {
    const a = doc({ id: "a" });
    const b = doc({ id: "b", status: "indexing", updated_at: 1 });
    const c = doc({ id: "c", status: "queued" });
    const snapshot = [a, b, c];
    const fetched = [doc({ id: "b", status: "indexing", chunks_done: 2, updated_at: 2 }), c];
    const bCancelledHere = doc({ id: "b", status: "cancelled", updated_at: 3 });
    const added = doc({ id: "d", status: "queued" });
    const current = [a, bCancelledHere, added]; // c deleted here meanwhile
    const merged = mergeRefresh(snapshot, 1, fetched, current, new Set(["c"]));
    expect(merged.map((d) => [d.id, d.status])).toEqual([
      ["a", "ready"],
      ["b", "cancelled"],
      ["d", "queued"],
    ]);
  });
});
