// One base's documents as the page shows them: loaded page by page (oldest first, the
// upload order), with the base's counts per status, kept fresh by polling while anything
// is queued or indexing. A poll re-reads only from the first pending document on (new
// uploads and the ones indexing are at the end, usually one request), and ends by
// itself when nothing is pending; dispose() ends it when the view goes.
import { signal } from "@preact/signals";
import { ApiError } from "../../api";
import * as kbApi from "./kbApi";
import type { KbDocument, StatusCounts } from "./kbApi";
import { countsPending, isPending } from "./progress";
import { poll } from "./poll";

/** Documents loaded when a base opens (ten requests at most); more with loadMore(). */
export const INITIAL_DOCUMENTS = 1000;

export interface DocumentsState {
  docs: KbDocument[];
  counts: StatusCounts;
  /** Documents past the loaded ones. */
  hasMore: boolean;
  loading: boolean;
  loadingMore: boolean;
  /** Loading failed (the table cannot be shown). */
  error: unknown;
  /** The last poll failed (the table is shown; polling goes on, slower). */
  pollError: unknown;
}

const initial: DocumentsState = {
  docs: [],
  counts: {},
  hasMore: false,
  loading: true,
  loadingMore: false,
  error: null,
  pollError: null,
};

/** A poll error after which polling is pointless: signed out, or the base is gone. */
function isFinal(error: unknown): boolean {
  return error instanceof ApiError && [401, 403, 404].includes(error.status);
}

export function isBusy(state: Pick<DocumentsState, "docs" | "counts">): boolean {
  return countsPending(state.counts) > 0 || state.docs.some((doc) => isPending(doc.status));
}

/** The newer of two versions of a document (by updated_at; `b` on a tie). */
function newer(a: KbDocument | undefined, b: KbDocument): KbDocument {
  return a && a.updated_at > b.updated_at ? a : b;
}

/** The documents after a refresh that re-read the documents from `start` on: those
 * before `start` as they are now, the re-read ones (a version changed here since is kept
 * when newer), then documents added here meanwhile; those deleted here left out. */
export function mergeRefresh(
  snapshot: readonly KbDocument[],
  start: number,
  fetched: readonly KbDocument[],
  current: readonly KbDocument[],
  deleted: ReadonlySet<string>,
): KbDocument[] {
  const now = new Map(current.map((doc) => [doc.id, doc]));
  const head = snapshot
    .slice(0, start)
    .filter((doc) => now.has(doc.id))
    .map((doc) => now.get(doc.id)!);
  const tail = fetched.filter((doc) => !deleted.has(doc.id)).map((doc) => newer(now.get(doc.id), doc));
  const known = new Set([...snapshot.map((doc) => doc.id), ...fetched.map((doc) => doc.id)]);
  const added = current.filter((doc) => !known.has(doc.id));
  return [...head, ...tail, ...added];
}

export class DocumentsStore {
  readonly state = signal<DocumentsState>(initial);
  private stopPolling: (() => void) | null = null;
  private readonly controller = new AbortController();
  private readonly deleted = new Set<string>();
  private refreshes = 0;
  private applied = 0;

  constructor(
    readonly kb: string,
    readonly interval = 1000,
  ) {}

  private set(changes: Partial<DocumentsState>): void {
    this.state.value = { ...this.state.value, ...changes };
  }

  get disposed(): boolean {
    return this.controller.signal.aborted;
  }

  /** Pages from the first until `max` documents or the end. */
  private async readPages(max: number, signal: AbortSignal) {
    const docs: KbDocument[] = [];
    let after: string | null = null;
    let hasMore = true;
    let counts: StatusCounts = {};
    while (hasMore && docs.length < max) {
      const page: kbApi.DocumentPage = await kbApi.listDocuments(this.kb, { after, signal });
      docs.push(...page.data);
      counts = page.counts;
      hasMore = page.has_more;
      after = page.last_id;
      if (!page.data.length) break;
    }
    return { docs, counts, hasMore };
  }

  async load(): Promise<void> {
    this.set({ loading: true, error: null });
    const seq = ++this.refreshes;
    try {
      const { docs, counts, hasMore } = await this.readPages(INITIAL_DOCUMENTS, this.controller.signal);
      if (this.disposed) return;
      this.applied = seq;
      this.set({ docs, counts, hasMore, loading: false, pollError: null });
      this.ensurePolling();
    } catch (error) {
      if (this.disposed) return;
      this.set({ loading: false, error });
    }
  }

  async loadMore(): Promise<void> {
    const { docs, hasMore, loadingMore } = this.state.value;
    if (!hasMore || loadingMore) return;
    this.set({ loadingMore: true, pollError: null });
    try {
      const page = await kbApi.listDocuments(this.kb, {
        after: docs[docs.length - 1]?.id,
        signal: this.controller.signal,
      });
      if (this.disposed) return;
      const have = new Set(this.state.value.docs.map((doc) => doc.id));
      this.set({
        docs: [...this.state.value.docs, ...page.data.filter((doc) => !have.has(doc.id))],
        counts: page.counts,
        hasMore: page.has_more,
        loadingMore: false,
      });
      this.ensurePolling();
    } catch (error) {
      if (this.disposed) return;
      this.set({ loadingMore: false, pollError: error });
    }
  }

  /** Read again the documents from the first pending one on (all the rest when every
   * page is loaded: documents added elsewhere appear), and the counts. */
  async refresh(signal: AbortSignal = this.controller.signal): Promise<void> {
    const seq = ++this.refreshes;
    const snapshot = this.state.value;
    const complete = !snapshot.hasMore;
    const first = snapshot.docs.findIndex((doc) => isPending(doc.status));
    const start = first >= 0 ? first : snapshot.docs.length;
    if (first < 0 && !complete) {
      // nothing pending among the loaded ones: only the counts can have changed
      const counts = await kbApi.statusCounts(this.kb, signal);
      if (this.disposed || seq < this.applied) return;
      this.applied = seq;
      this.set({ counts, pollError: null });
      return;
    }
    const after = start > 0 ? snapshot.docs[start - 1].id : null;
    const want = snapshot.docs.length - start;
    const fetched: KbDocument[] = [];
    let cursor = after;
    let hasMore = true;
    let counts: StatusCounts = snapshot.counts;
    while (hasMore) {
      const page: kbApi.DocumentPage = await kbApi.listDocuments(this.kb, { after: cursor, signal });
      fetched.push(...page.data);
      counts = page.counts;
      hasMore = page.has_more;
      cursor = page.last_id;
      if (!page.data.length || (!complete && fetched.length >= want)) break;
    }
    if (this.disposed || seq < this.applied) return;
    if (after && !fetched.length && want > 0) {
      // the document before the window is gone (deleted elsewhere): read from the start
      const loaded = Math.max(snapshot.docs.length, 1);
      const again = await this.readPages(loaded, signal);
      if (this.disposed || seq < this.applied) return;
      this.applied = seq;
      const docs = again.docs.filter((doc) => !this.deleted.has(doc.id));
      this.set({ docs, counts: again.counts, hasMore: again.hasMore, pollError: null });
      return;
    }
    this.applied = seq;
    const docs = mergeRefresh(snapshot.docs, start, fetched, this.state.value.docs, this.deleted);
    this.set({ docs, counts, hasMore, pollError: null });
  }

  /** Poll while something is pending; a no-op when already polling or nothing is. */
  ensurePolling(): void {
    if (this.disposed || this.stopPolling || !isBusy(this.state.value)) return;
    this.stopPolling = poll(
      async (signal) => {
        await this.refresh(signal);
        return isBusy(this.state.value);
      },
      {
        interval: this.interval,
        onError: (error) => {
          this.set({ pollError: error });
          return !isFinal(error);
        },
        onDone: () => {
          this.stopPolling = null;
        },
      },
    );
  }

  get polling(): boolean {
    return this.stopPolling !== null;
  }

  /** Documents just queued by an upload: shown at once when every page is loaded (they
   * are the newest, so the last), and counted. */
  addQueued(queued: readonly KbDocument[]): void {
    if (!queued.length || this.disposed) return;
    const { docs, counts, hasMore } = this.state.value;
    const have = new Set(docs.map((doc) => doc.id));
    const fresh = queued.filter((doc) => !have.has(doc.id));
    const next = { ...counts };
    for (const doc of fresh) next[doc.status] = (next[doc.status] ?? 0) + 1;
    this.set({ docs: hasMore ? docs : [...docs, ...fresh], counts: next });
    this.ensurePolling();
  }

  private replace(doc: KbDocument): void {
    const { docs, counts } = this.state.value;
    const old = docs.find((d) => d.id === doc.id);
    const next = { ...counts };
    if (old && old.status !== doc.status) {
      next[old.status] = Math.max(0, (next[old.status] ?? 0) - 1);
      next[doc.status] = (next[doc.status] ?? 0) + 1;
    }
    this.set({ docs: docs.map((d) => (d.id === doc.id ? doc : d)), counts: next });
  }

  async cancel(id: string): Promise<void> {
    this.replace(await kbApi.cancelDocument(this.kb, id));
  }

  async reindex(id: string): Promise<void> {
    this.replace(await kbApi.reindexDocument(this.kb, id));
    this.ensurePolling();
  }

  async remove(id: string): Promise<void> {
    await kbApi.deleteDocument(this.kb, id);
    this.deleted.add(id);
    const { docs, counts } = this.state.value;
    const old = docs.find((d) => d.id === id);
    const next = { ...counts };
    if (old) next[old.status] = Math.max(0, (next[old.status] ?? 0) - 1);
    this.set({ docs: docs.filter((d) => d.id !== id), counts: next });
  }

  /** Every document again (the server's current embedding model); how many were queued. */
  async reindexAll(): Promise<number> {
    const { queued } = await kbApi.reindexBase(this.kb);
    // every document is queued again now: the window re-reads all loaded ones
    const { docs } = this.state.value;
    this.set({
      docs: docs.map((doc) =>
        doc.status === "ready" || doc.status === "failed" || doc.status === "cancelled"
          ? { ...doc, status: "queued", chunks_done: 0, error: null }
          : doc,
      ),
    });
    await this.refresh().catch(() => undefined);
    this.ensurePolling();
    return queued;
  }

  dispose(): void {
    this.controller.abort();
    this.stopPolling?.();
    this.stopPolling = null;
  }
}
