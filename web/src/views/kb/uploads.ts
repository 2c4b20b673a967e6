// Uploads to a base: files wait in line and go in batches (one request at a time), each
// file's share of the bytes sent shown as it goes; the server's answer says which became
// documents (then indexed: their progress is the documents table's) and why the others
// were refused. Uploads outlive the view (one store per base, for the page's life): going
// to a chat and back finds them still going, and leaving the page while they run asks
// first.
import { signal } from "@preact/signals";
import { ApiError } from "../../api";
import { errorText } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { batches, type FileSelection } from "./files";
import { uploadFiles, type KbDocument, type UploadPart } from "./kbApi";
import { matchUpload, perFileLoaded } from "./progress";

export type UploadState = "waiting" | "uploading" | "done" | "refused" | "stopped";

export interface UploadItem {
  key: number;
  file: File;
  /** Where it was in what was picked ("notes/a.md"); the server keeps the name only. */
  path: string;
  size: number;
  /** Bytes sent. */
  loaded: number;
  state: UploadState;
  /** Why the server refused it, as it said. */
  error: string | null;
  /** Refused for a reason that may pass (the queue was full, the network failed). */
  retryable: boolean;
  documentId: string | null;
}

/** Codes of refusals that may pass by themselves: the ingestion queue was full. */
const RETRYABLE_CODES = new Set(["ingestion_queue_full", "too_many_queued_documents", "network_error"]);

function retryableError(error: unknown): boolean {
  if (!(error instanceof ApiError)) return true;
  return (
    error.status === 0 ||
    error.status === 429 ||
    error.status >= 500 ||
    (error.code !== null && RETRYABLE_CODES.has(error.code))
  );
}

let nextKey = 1;

export class UploadsStore {
  readonly items = signal<UploadItem[]>([]);
  /** Paths left out of picked folders (hidden, or not a document type). */
  readonly skipped = signal<string[]>([]);
  readonly running = signal(false);
  /** Told of the documents each request queued (the documents table, while shown). */
  onQueued: ((docs: KbDocument[]) => void) | null = null;
  private controller: AbortController | null = null;

  constructor(
    readonly kb: string,
    readonly send: typeof uploadFiles = uploadFiles,
  ) {}

  private update(keys: ReadonlySet<number>, change: (item: UploadItem) => Partial<UploadItem>): void {
    this.items.value = this.items.value.map((item) =>
      keys.has(item.key) ? { ...item, ...change(item) } : item,
    );
  }

  /** Queue what was picked (or dropped) and start sending. */
  add(selection: FileSelection): void {
    const added: UploadItem[] = selection.files.map(({ file, path }) => ({
      key: nextKey++,
      file,
      path,
      size: file.size,
      loaded: 0,
      state: "waiting",
      error: null,
      retryable: false,
      documentId: null,
    }));
    this.items.value = [...this.items.value, ...added];
    if (selection.skipped.length) this.skipped.value = [...this.skipped.value, ...selection.skipped];
    void this.run();
  }

  /** Send a refused or stopped file again. */
  retry(key: number): void {
    this.update(new Set([key]), () => ({ state: "waiting", error: null, retryable: false, loaded: 0 }));
    void this.run();
  }

  /** Stop the request in flight and the files waiting. */
  stop(): void {
    const waiting = new Set(
      this.items.value.filter((item) => item.state === "waiting").map((item) => item.key),
    );
    this.update(waiting, () => ({ state: "stopped", retryable: true }));
    this.controller?.abort();
  }

  /** Forget the files that are done (uploaded, refused or stopped). */
  clearFinished(): void {
    this.items.value = this.items.value.filter(
      (item) => item.state === "waiting" || item.state === "uploading",
    );
    this.skipped.value = [];
  }

  private async run(): Promise<void> {
    if (this.running.value) return;
    this.running.value = true;
    guardUnload(+1);
    try {
      for (;;) {
        const waiting = this.items.value.filter((item) => item.state === "waiting");
        if (!waiting.length) return;
        await this.sendBatch(batches(waiting)[0]);
      }
    } finally {
      this.running.value = false;
      this.controller = null;
      guardUnload(-1);
    }
  }

  private async sendBatch(batch: UploadItem[]): Promise<void> {
    const keys = new Set(batch.map((item) => item.key));
    this.update(keys, () => ({ state: "uploading", loaded: 0 }));
    const parts: UploadPart[] = batch.map((item) => ({ file: item.file, name: item.file.name }));
    const sizes = batch.map((item) => item.size);
    this.controller = new AbortController();
    try {
      const result = await this.send(
        this.kb,
        parts,
        (loaded, total) => {
          const each = perFileLoaded(sizes, loaded, total);
          const byKey = new Map(batch.map((item, i) => [item.key, each[i]]));
          this.update(keys, (item) => ({ loaded: byKey.get(item.key) ?? item.loaded }));
        },
        this.controller.signal,
      );
      const outcomes = matchUpload(batch, result);
      this.items.value = this.items.value.map((item) => {
        const index = batch.findIndex((sent) => sent.key === item.key);
        if (index < 0) return item;
        const outcome = outcomes[index];
        if (outcome.kind === "queued") {
          return { ...item, state: "done", loaded: item.size, documentId: outcome.document.id };
        }
        if (outcome.kind === "refused") {
          return {
            ...item,
            state: "refused",
            error: outcome.failure.error,
            retryable: RETRYABLE_CODES.has(outcome.failure.code ?? ""),
          };
        }
        return { ...item, state: "refused", error: t("kb.upload.noAnswer"), retryable: true };
      });
      if (result.data.length) this.onQueued?.(result.data);
    } catch (error) {
      if (error instanceof DOMException && error.name === "AbortError") {
        this.update(keys, () => ({ state: "stopped", loaded: 0, retryable: true }));
        return;
      }
      const reason = errorText(error);
      const retryable = retryableError(error);
      this.update(keys, () => ({ state: "refused", error: reason, retryable, loaded: 0 }));
    }
  }
}

const stores = new Map<string, UploadsStore>();

/** The base's uploads (one store per base id for the page's life). */
export function uploadsFor(kb: string): UploadsStore {
  let store = stores.get(kb);
  if (!store) {
    store = new UploadsStore(kb);
    stores.set(kb, store);
  }
  return store;
}

/** Forget a base's uploads (the base was deleted). */
export function dropUploads(kb: string): void {
  stores.get(kb)?.stop();
  stores.delete(kb);
}

let active = 0;
function onBeforeUnload(event: BeforeUnloadEvent) {
  event.preventDefault();
}
/** While an upload runs, leaving the page asks first (the browser's own question). */
function guardUnload(change: number): void {
  const before = active;
  active += change;
  if (before === 0 && active > 0) addEventListener("beforeunload", onBeforeUnload);
  if (before > 0 && active === 0) removeEventListener("beforeunload", onBeforeUnload);
}
