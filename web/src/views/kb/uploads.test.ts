import { describe, expect, it, vi } from "vitest";
import { ApiError } from "../../api";
import type { UploadPart, UploadResult } from "./kbApi";
import { doc } from "./testkit";
import { UploadsStore } from "./uploads";

const file = (name: string, content: string) => ({ file: new File([content], name), path: `folder/${name}` });

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((ok, fail) => {
    resolve = ok;
    reject = fail;
  });
  return { promise, resolve, reject };
}

describe("UploadsStore", () => {
  it("shows each file's bytes sent, then which were queued and why others were refused", async () => {
    const answer = deferred<UploadResult>();
    let progress: (loaded: number, total: number) => void = () => {};
    let sent: UploadPart[] = [];
    const send = vi.fn((_kb: string, parts: UploadPart[], onProgress: typeof progress) => {
      sent = parts;
      progress = onProgress;
      return answer.promise;
    });
    const store = new UploadsStore("kb_1", send);
    const queued = vi.fn();
    store.onQueued = queued;
    store.add({
      files: [file("a.md", "aaaa"), file("empty.md", ""), file("b.md", "bbbb")],
      skipped: ["folder/.DS_Store"],
    });
    expect(store.running.value).toBe(true);
    expect(sent.map((p) => p.name)).toEqual(["a.md", "empty.md", "b.md"]); // the server keeps names only
    expect(store.items.value.map((i) => i.state)).toEqual(["uploading", "uploading", "uploading"]);

    progress(5, 10); // half the body: a.md sent (4 of 8 bytes), b.md not yet
    expect(store.items.value.map((i) => i.loaded)).toEqual([4, 0, 0]);

    const d1 = doc({ id: "d1", filename: "a.md", size: 4, status: "queued" });
    const d3 = doc({ id: "d3", filename: "b.md", size: 4, status: "queued" });
    answer.resolve({
      object: "list",
      data: [d1, d3],
      failed_files: [{ filename: "empty.md", error: "empty.md is empty", code: "empty_file" }],
    });
    await vi.waitFor(() => expect(store.running.value).toBe(false));
    const items = store.items.value;
    expect(items.map((i) => i.state)).toEqual(["done", "refused", "done"]);
    expect(items.map((i) => i.documentId)).toEqual(["d1", null, "d3"]);
    expect(items[1].error).toBe("empty.md is empty");
    expect(items[1].retryable).toBe(false);
    expect(queued).toHaveBeenCalledWith([d1, d3]);
    expect(store.skipped.value).toEqual(["folder/.DS_Store"]);

    store.clearFinished();
    expect(store.items.value).toEqual([]);
    expect(store.skipped.value).toEqual([]);
  });

  it("marks a whole batch refused with the server's reason, retryable when the queue was full", async () => {
    const send = vi
      .fn()
      .mockRejectedValueOnce(new ApiError("no file was accepted: the ingestion queue is full", 503, "ingestion_queue_full"))
      .mockResolvedValueOnce({ object: "list", data: [doc({ id: "d9", size: 1 })], failed_files: [] });
    const store = new UploadsStore("kb_1", send);
    store.add({ files: [file("a.md", "a")], skipped: [] });
    await vi.waitFor(() => expect(store.running.value).toBe(false));
    const [item] = store.items.value;
    expect(item.state).toBe("refused");
    expect(item.error).toBe("no file was accepted: the ingestion queue is full");
    expect(item.retryable).toBe(true);

    store.retry(item.key);
    await vi.waitFor(() => expect(store.items.value[0].state).toBe("done"));
    expect(send).toHaveBeenCalledTimes(2);
  });

  it("sends batches one after another", async () => {
    let inFlight = 0;
    let most = 0;
    const send = vi.fn(async (_kb: string, parts: UploadPart[]) => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      await new Promise((r) => setTimeout(r, 1));
      inFlight -= 1;
      return {
        object: "list" as const,
        data: parts.map((p, i) => doc({ id: `${p.name}-${i}`, size: p.file.size })),
        failed_files: [],
      };
    });
    const store = new UploadsStore("kb_1", send);
    store.add({ files: Array.from({ length: 20 }, (_, i) => file(`${i}.md`, "x")), skipped: [] });
    await vi.waitFor(() => expect(store.running.value).toBe(false));
    expect(send).toHaveBeenCalledTimes(3); // 8 + 8 + 4
    expect(most).toBe(1);
    expect(store.items.value.every((i) => i.state === "done")).toBe(true);
  });

  it("stops the request in flight and the files waiting", async () => {
    const send = vi.fn(
      (_kb: string, _parts: UploadPart[], _p: unknown, signal?: AbortSignal) =>
        new Promise<UploadResult>((_ok, fail) =>
          signal?.addEventListener("abort", () => fail(new DOMException("stopped", "AbortError"))),
        ),
    );
    const store = new UploadsStore("kb_1", send);
    store.add({ files: Array.from({ length: 10 }, (_, i) => file(`${i}.md`, "x")), skipped: [] });
    store.stop();
    await vi.waitFor(() => expect(store.running.value).toBe(false));
    expect(send).toHaveBeenCalledTimes(1);
    expect(store.items.value.every((i) => i.state === "stopped" && i.retryable)).toBe(true);
  });
});
