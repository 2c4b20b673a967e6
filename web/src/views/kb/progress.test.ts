import { describe, expect, it } from "vitest";
import {
  baseProgress,
  canCancel,
  canReindex,
  documentFraction,
  documentProgress,
  matchUpload,
  perFileLoaded,
} from "./progress";
import { doc } from "./testkit";

describe("a document's progress", () => {
  it("is chunks_done of chunks_total while indexing", () => {
    expect(documentProgress(doc({ status: "indexing", chunks_done: 3, chunks_total: 12 }))).toEqual({
      value: 3,
      max: 12,
    });
    expect(documentFraction(doc({ status: "indexing", chunks_done: 3, chunks_total: 12 }))).toBe(0.25);
  });

  it("is indeterminate while the document is read (no chunk count yet)", () => {
    expect(documentProgress(doc({ status: "indexing", chunks_done: 0, chunks_total: null }))).toEqual({
      value: null,
      max: 1,
    });
    expect(documentFraction(doc({ status: "indexing", chunks_total: null }))).toBe(0);
  });

  it("is empty when queued, full when ready, none when failed or cancelled", () => {
    expect(documentProgress(doc({ status: "queued", chunks_total: null, chunks_done: 0 }))).toEqual({
      value: 0,
      max: 1,
    });
    expect(documentProgress(doc({ status: "ready", chunks_done: 7, chunks_total: 7 }))).toEqual({
      value: 7,
      max: 7,
    });
    expect(documentFraction(doc({ status: "ready" }))).toBe(1);
    expect(documentProgress(doc({ status: "failed" }))).toBeNull();
    expect(documentProgress(doc({ status: "cancelled" }))).toBeNull();
  });

  it("never shows more done than total", () => {
    expect(documentProgress(doc({ status: "indexing", chunks_done: 15, chunks_total: 12 }))).toEqual({
      value: 12,
      max: 12,
    });
  });

  it("offers cancel while pending and re-index once finished", () => {
    expect(canCancel("queued") && canCancel("indexing")).toBe(true);
    expect(canCancel("ready") || canCancel("failed")).toBe(false);
    expect(canReindex("ready") && canReindex("failed") && canReindex("cancelled")).toBe(true);
    expect(canReindex("indexing") || canReindex("queued") || canReindex("deleting")).toBe(false);
  });
});

describe("a base's progress", () => {
  it("counts finished documents and the share done of those indexing", () => {
    const p = baseProgress({ ready: 5, failed: 1, cancelled: 1, queued: 2, indexing: 1 }, [
      doc({ id: "a", status: "ready", chunks_done: 4, chunks_total: 4 }),
      doc({ id: "b", status: "indexing", chunks_done: 5, chunks_total: 20 }),
      doc({ id: "c", status: "queued", chunks_done: 0, chunks_total: null }),
      doc({ id: "d", status: "failed", chunks_done: 0, chunks_total: null }),
    ]);
    expect(p.total).toBe(10);
    expect(p.value).toBeCloseTo(7.25);
    expect(p.chunksDone).toBe(9);
    expect(p.chunksTotal).toBe(24);
    expect(p.queued).toBe(2);
    expect(p.indexing).toBe(1);
  });

  it("is zero of zero for an empty base and whole when everything is ready", () => {
    expect(baseProgress({}, [])).toMatchObject({ total: 0, value: 0 });
    expect(baseProgress({ ready: 3 }, [])).toMatchObject({ total: 3, value: 3 });
  });

  it("does not count more indexing share than the counts say are indexing", () => {
    const p = baseProgress({ ready: 1, indexing: 0 }, [
      doc({ status: "indexing", chunks_done: 9, chunks_total: 10 }),
    ]);
    expect(p.value).toBe(1);
  });
});

describe("each file's share of an upload request", () => {
  it("spreads the bytes sent over the files in order", () => {
    // 3 files of 100, 50 and 50 bytes; the body is 220 bytes with framing
    expect(perFileLoaded([100, 50, 50], 0, 220)).toEqual([0, 0, 0]);
    expect(perFileLoaded([100, 50, 50], 110, 220)).toEqual([100, 0, 0]);
    expect(perFileLoaded([100, 50, 50], 165, 220)).toEqual([100, 50, 0]);
    expect(perFileLoaded([100, 50, 50], 220, 220)).toEqual([100, 50, 50]);
    const partial = perFileLoaded([100, 50, 50], 55, 220);
    expect(partial[0]).toBe(50);
  });

  it("is nothing before the size is known", () => {
    expect(perFileLoaded([10], 0, 0)).toEqual([0]);
  });
});

describe("matching an upload's answer to its files", () => {
  it("pairs queued documents by order and size, refused files with their reason", () => {
    const files = [{ size: 10 }, { size: 0 }, { size: 30 }, { size: 999 }];
    const outcomes = matchUpload(files, {
      data: [doc({ id: "d1", size: 10 }), doc({ id: "d3", size: 30 })],
      failed_files: [
        { filename: "empty.md", error: "empty.md is empty", code: "empty_file" },
        { filename: "big.pdf", error: "big.pdf is larger than 500 bytes", code: "upload_too_large" },
      ],
    });
    expect(outcomes.map((o) => o.kind)).toEqual(["queued", "refused", "queued", "refused"]);
    expect(outcomes[0].kind === "queued" && outcomes[0].document.id).toBe("d1");
    expect(outcomes[2].kind === "queued" && outcomes[2].document.id).toBe("d3");
    expect(outcomes[3].kind === "refused" && outcomes[3].failure.error).toBe("big.pdf is larger than 500 bytes");
  });

  it("refuses every file after a full queue", () => {
    const files = [{ size: 10 }, { size: 10 }, { size: 10 }];
    const full = { filename: "x", error: "the ingestion queue is full", code: "ingestion_queue_full" };
    const outcomes = matchUpload(files, { data: [doc({ size: 10 })], failed_files: [full, full] });
    expect(outcomes.map((o) => o.kind)).toEqual(["queued", "refused", "refused"]);
  });

  it("says unknown when the answer is short", () => {
    expect(matchUpload([{ size: 1 }], { data: [], failed_files: [] })).toEqual([{ kind: "unknown" }]);
  });
});
