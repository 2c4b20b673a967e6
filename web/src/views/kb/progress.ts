// How far along things are: a document's indexing (chunks_done of chunks_total), a whole
// base's (documents finished, the ones indexing counted by their share of chunks), and
// each file of an upload request (its share of the bytes sent).
import type { DocumentStatus, KbDocument, StatusCounts, UploadFailure, UploadResult } from "./kbApi";

/** Statuses that will change by themselves: the page polls while any is there. */
export const PENDING: readonly DocumentStatus[] = ["queued", "indexing"];

export function isPending(status: DocumentStatus): boolean {
  return PENDING.includes(status);
}

export function canCancel(status: DocumentStatus): boolean {
  return isPending(status);
}

export function canReindex(status: DocumentStatus): boolean {
  return status === "ready" || status === "failed" || status === "cancelled";
}

/** What a <progress> shows: `value` null is indeterminate (no value attribute). */
export interface Progress {
  value: number | null;
  max: number;
}

/** A document's indexing: queued 0, indexing chunks_done of chunks_total (indeterminate
 * until the document is read and its chunks counted), ready full; failed, cancelled and
 * deleting have none. */
export function documentProgress(
  doc: Pick<KbDocument, "status" | "chunks_done" | "chunks_total">,
): Progress | null {
  const total = doc.chunks_total ?? 0;
  switch (doc.status) {
    case "queued":
      return { value: 0, max: 1 };
    case "indexing":
      return total > 0
        ? { value: Math.min(doc.chunks_done, total), max: total }
        : { value: null, max: 1 };
    case "ready":
      return total > 0 ? { value: total, max: total } : { value: 1, max: 1 };
    default:
      return null;
  }
}

/** 0..1 of a document's indexing (what the server's `progress` says, computed the same
 * way); 0 when unknown. */
export function documentFraction(
  doc: Pick<KbDocument, "status" | "chunks_done" | "chunks_total">,
): number {
  const progress = documentProgress(doc);
  if (!progress || progress.value === null) return 0;
  return progress.value / progress.max;
}

export interface BaseProgress {
  total: number;
  ready: number;
  failed: number;
  cancelled: number;
  queued: number;
  indexing: number;
  /** Documents finished (ready, failed or cancelled) plus the share done of those indexing. */
  value: number;
  /** Chunks written and to write, over the loaded documents whose count is known. */
  chunksDone: number;
  chunksTotal: number;
}

/** The whole base: `counts` (documents per status over every page, from the list route)
 * and the loaded documents, whose indexing ones add their share of chunks. */
export function baseProgress(
  counts: StatusCounts,
  docs: readonly Pick<KbDocument, "status" | "chunks_done" | "chunks_total">[],
): BaseProgress {
  const n = (status: DocumentStatus) => counts[status] ?? 0;
  const ready = n("ready");
  const failed = n("failed");
  const cancelled = n("cancelled");
  const queued = n("queued");
  const indexing = n("indexing");
  const total = ready + failed + cancelled + queued + indexing;
  let partial = 0;
  let chunksDone = 0;
  let chunksTotal = 0;
  for (const doc of docs) {
    if (doc.status === "indexing") partial += documentFraction(doc);
    if ((doc.status === "indexing" || doc.status === "ready") && doc.chunks_total) {
      chunksDone += Math.min(doc.chunks_done, doc.chunks_total);
      chunksTotal += doc.chunks_total;
    }
  }
  // the loaded page may hold more indexing documents than the counts (fetched apart)
  partial = Math.min(partial, indexing);
  return {
    total,
    ready,
    failed,
    cancelled,
    queued,
    indexing,
    value: ready + failed + cancelled + partial,
    chunksDone,
    chunksTotal,
  };
}

export function countsPending(counts: StatusCounts): number {
  return (counts.queued ?? 0) + (counts.indexing ?? 0);
}

/** Bytes of each file sent so far, from the request's progress: the multipart body is
 * the files in order plus a little framing, spread over them by size. */
export function perFileLoaded(sizes: readonly number[], loaded: number, total: number): number[] {
  const payload = sizes.reduce((sum, size) => sum + size, 0);
  if (total <= 0) return sizes.map(() => 0);
  const sent = loaded >= total ? payload : (loaded / total) * payload;
  let offset = 0;
  return sizes.map((size) => {
    const mine = Math.max(0, Math.min(size, sent - offset));
    offset += size;
    return mine;
  });
}

export type UploadOutcome =
  | { kind: "queued"; document: KbDocument }
  | { kind: "refused"; failure: UploadFailure }
  | { kind: "unknown" };

/** Which file became which document, or why it was refused. The server answers in the
 * order sent: `data` the queued documents, `failed_files` the refused files (as sent,
 * under the name sent). A queued document has the file's size; a refused file is either
 * too large or empty (so never the size of a queued one), or the queue was full (then
 * every later file was refused too): so taking, file by file, the next queued document
 * when its size matches, else the next refused file, is exact. */
export function matchUpload(
  files: readonly { size: number }[],
  result: Pick<UploadResult, "data" | "failed_files">,
): UploadOutcome[] {
  let queued = 0;
  let failed = 0;
  return files.map((file) => {
    const document = result.data[queued];
    if (document && document.size === file.size) {
      queued += 1;
      return { kind: "queued", document };
    }
    const failure = result.failed_files[failed];
    if (failure) {
      failed += 1;
      return { kind: "refused", failure };
    }
    return { kind: "unknown" };
  });
}
