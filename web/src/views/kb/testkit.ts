// Test helpers (imported by tests only): documents, and a fake Parley answering the
// knowledge-base routes through a mocked fetch.
import type { KbDocument, KnowledgeBase, SearchHit } from "./kbApi";

export function doc(overrides: Partial<KbDocument> = {}): KbDocument {
  return {
    id: "doc_1",
    object: "knowledge_base.document",
    knowledge_base_id: "kb_1",
    filename: "a.md",
    content_type: "text/markdown",
    size: 10,
    sha256: "0",
    status: "ready",
    error: null,
    chunks_total: 4,
    chunks_done: 4,
    progress: 1,
    pages: null,
    title: null,
    created_at: 1,
    updated_at: 1,
    ...overrides,
  };
}

export function base(overrides: Partial<KnowledgeBase> = {}): KnowledgeBase {
  return {
    id: "kb_1",
    object: "knowledge_base",
    name: "handbook",
    description: "",
    embedding_model: null,
    dimensions: null,
    chunk_size: 1400,
    chunk_overlap: 180,
    documents: 0,
    chunks: 0,
    created_at: 1,
    updated_at: 1,
    ...overrides,
  };
}

export interface Call {
  method: string;
  path: string;
  query: URLSearchParams;
  body: unknown;
}

/** A fake server: `bases` and `docs` (per base id) are its data, changed by the tests
 * between polls; every request is recorded in `calls`. */
export function fakeServer() {
  const server = {
    bases: [] as KnowledgeBase[],
    docs: {} as Record<string, KbDocument[]>,
    hits: [] as SearchHit[],
    calls: [] as Call[],
    /** Answers to force: path -> [status, body]. */
    errors: {} as Record<string, [number, unknown]>,
    fetch: async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
      const url = new URL(String(input), "http://parley.test");
      const method = init.method ?? "GET";
      const body = typeof init.body === "string" ? JSON.parse(init.body) : undefined;
      server.calls.push({ method, path: url.pathname, query: url.searchParams, body });
      const json = (status: number, value: unknown) =>
        new Response(JSON.stringify(value), { status, headers: { "Content-Type": "application/json" } });
      const forced = server.errors[`${method} ${url.pathname}`];
      if (forced) return json(forced[0], forced[1]);
      const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent); // v1 knowledge_bases ...
      const [, , kb, sub, docId, action] = parts;
      const notFound = () => json(404, { error: { message: `knowledge base '${kb}' not found` } });
      if (!kb) {
        if (method === "POST") {
          const created = { ...base({ id: `kb_${server.bases.length + 1}`, ...(body as object) }) };
          server.bases.unshift(created);
          return json(200, created);
        }
        return json(200, { object: "list", data: server.bases, has_more: false });
      }
      const found = server.bases.find((b) => b.id === kb || b.name === kb);
      if (!found) return notFound();
      const docs = (server.docs[found.id] ??= []);
      if (!sub) {
        if (method === "DELETE") {
          server.bases = server.bases.filter((b) => b !== found);
          return json(200, { id: found.id, deleted: true });
        }
        if (method === "PATCH") {
          Object.assign(found, body);
          return json(200, found);
        }
        return json(200, { ...found, documents: docs.length });
      }
      if (sub === "search") return json(200, { object: "list", data: server.hits });
      if (sub === "reindex") {
        for (const d of docs) Object.assign(d, { status: "queued", chunks_done: 0, updated_at: d.updated_at + 1 });
        return json(200, { queued: docs.length });
      }
      if (sub === "documents" && !docId) {
        const limit = Number(url.searchParams.get("limit") ?? 20);
        const after = url.searchParams.get("after");
        const start = after ? docs.findIndex((d) => d.id === after) + 1 : 0;
        if (after && start === 0) return json(200, { object: "list", data: [], has_more: false, counts: {} });
        const page = docs.slice(start, start + limit);
        const counts: Record<string, number> = {};
        for (const d of docs) counts[d.status] = (counts[d.status] ?? 0) + 1;
        return json(200, {
          object: "list",
          data: page,
          has_more: start + limit < docs.length,
          first_id: page[0]?.id ?? null,
          last_id: page[page.length - 1]?.id ?? null,
          counts,
        });
      }
      const document = docs.find((d) => d.id === docId);
      if (!document) return json(404, { error: { message: `document '${docId}' not found` } });
      if (method === "DELETE") {
        server.docs[found.id] = docs.filter((d) => d !== document);
        return json(200, { id: docId, deleted: true });
      }
      if (action === "cancel") {
        Object.assign(document, { status: "cancelled", error: "cancelled by the user", updated_at: document.updated_at + 1 });
      }
      if (action === "reindex") {
        Object.assign(document, { status: "queued", chunks_done: 0, error: null, updated_at: document.updated_at + 1 });
      }
      return json(200, document);
    },
    /** Requests matching `method` and a path ending with `suffix`. */
    count(method: string, suffix: string): number {
      return server.calls.filter((c) => c.method === method && c.path.endsWith(suffix)).length;
    },
  };
  return server;
}
