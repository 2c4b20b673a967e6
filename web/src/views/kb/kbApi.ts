// The knowledge-base routes of Parley's API (README "Knowledge bases and memory",
// src/parley/api/knowledge.py): bases, their documents, uploads and search. JSON routes go
// through api.ts; uploads use XMLHttpRequest, the one browser API with upload progress.
import { api, ApiError } from "../../api";
import { t } from "../../i18n";

export type DocumentStatus = "queued" | "indexing" | "ready" | "failed" | "cancelled" | "deleting";

export interface KnowledgeBase {
  id: string;
  object: "knowledge_base";
  name: string;
  description: string;
  embedding_model: string | null;
  dimensions: number | null;
  chunk_size: number;
  chunk_overlap: number;
  documents: number;
  chunks: number;
  created_at: number;
  updated_at: number;
}

export interface KbDocument {
  id: string;
  object: "knowledge_base.document";
  knowledge_base_id: string;
  filename: string;
  content_type: string | null;
  size: number;
  sha256: string;
  status: DocumentStatus;
  error: string | null;
  chunks_total: number | null;
  chunks_done: number;
  progress: number | null;
  pages: number | null;
  title: string | null;
  created_at: number;
  updated_at: number;
}

/** Documents per status, over the whole base (every page). */
export type StatusCounts = Partial<Record<DocumentStatus, number>>;

export interface ListPage<T> {
  object: "list";
  data: T[];
  has_more: boolean;
  first_id: string | null;
  last_id: string | null;
}

export interface DocumentPage extends ListPage<KbDocument> {
  counts: StatusCounts;
}

export interface UploadFailure {
  filename: string;
  error: string;
  code: string | null;
}

export interface UploadResult {
  object: "list";
  data: KbDocument[];
  failed_files: UploadFailure[];
}

export interface SearchHit {
  rank: number;
  score: number;
  chunk_id: string;
  knowledge_base_id: string;
  knowledge_base: string;
  document_id: string;
  filename: string;
  title: string | null;
  page: number | null;
  section: string | null;
  text: string;
}

/** The most the list routes give per page. */
export const PAGE_LIMIT = 100;

export const basePath = (kb: string) => `/v1/knowledge_bases/${encodeURIComponent(kb)}`;
export const documentPath = (kb: string, doc: string) =>
  `${basePath(kb)}/documents/${encodeURIComponent(doc)}`;
/** The original bytes, served by the server as an attachment (never inline). */
export const contentUrl = (kb: string, doc: string) => `${documentPath(kb, doc)}/content`;

export function listBases(after?: string | null, signal?: AbortSignal) {
  return api<ListPage<KnowledgeBase>>("/v1/knowledge_bases", {
    query: { limit: PAGE_LIMIT, after },
    signal,
  });
}

export function getBase(kb: string, signal?: AbortSignal) {
  return api<KnowledgeBase>(basePath(kb), { signal });
}

export function createBase(name: string, description: string) {
  return api<KnowledgeBase>("/v1/knowledge_bases", { method: "POST", body: { name, description } });
}

export function updateBase(kb: string, changes: { name?: string; description?: string }) {
  return api<KnowledgeBase>(basePath(kb), { method: "PATCH", body: changes });
}

export function deleteBase(kb: string) {
  return api(basePath(kb), { method: "DELETE" });
}

export function reindexBase(kb: string) {
  return api<{ queued: number }>(`${basePath(kb)}/reindex`, { method: "POST" });
}

export function listDocuments(
  kb: string,
  options: { after?: string | null; limit?: number; signal?: AbortSignal } = {},
) {
  return api<DocumentPage>(`${basePath(kb)}/documents`, {
    query: { limit: options.limit ?? PAGE_LIMIT, after: options.after },
    signal: options.signal,
  });
}

/** Documents per status: the counts of a one-document page. */
export async function statusCounts(kb: string, signal?: AbortSignal): Promise<StatusCounts> {
  return (await listDocuments(kb, { limit: 1, signal })).counts;
}

export function cancelDocument(kb: string, doc: string) {
  return api<KbDocument>(`${documentPath(kb, doc)}/cancel`, { method: "POST" });
}

export function reindexDocument(kb: string, doc: string) {
  return api<KbDocument>(`${documentPath(kb, doc)}/reindex`, { method: "POST" });
}

export function deleteDocument(kb: string, doc: string) {
  return api(documentPath(kb, doc), { method: "DELETE" });
}

export function search(kb: string, query: string, topK = 10, signal?: AbortSignal) {
  return api<ListPage<SearchHit>>(`${basePath(kb)}/search`, {
    method: "POST",
    body: { query, top_k: topK },
    signal,
  });
}

function errorFromXhr(xhr: XMLHttpRequest): ApiError {
  let message = `${xhr.status} ${xhr.statusText}`.trim();
  let code: string | null = null;
  let param: string | null = null;
  try {
    const body = JSON.parse(xhr.responseText) as {
      error?: { message?: string; code?: string; param?: string };
    };
    if (body.error?.message) message = body.error.message;
    code = body.error?.code ?? null;
    param = body.error?.param ?? null;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(message, xhr.status, code, param);
}

export interface UploadPart {
  file: File;
  /** The name sent as the part's filename. */
  name: string;
}

/** POST the files as one multipart request (`files` fields), reporting bytes sent.
 * Resolves with the server's answer (202: the queued documents and the refused files);
 * rejects with an ApiError (every file refused, or the request failed), or with a
 * DOMException "AbortError" when `signal` aborts. */
export function uploadFiles(
  kb: string,
  parts: UploadPart[],
  onProgress: (loaded: number, total: number) => void,
  signal?: AbortSignal,
): Promise<UploadResult> {
  return new Promise((resolve, reject) => {
    const form = new FormData();
    for (const part of parts) form.append("files", part.file, part.name);
    const xhr = new XMLHttpRequest();
    const abort = () => xhr.abort();
    xhr.open("POST", `${basePath(kb)}/documents`);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    };
    xhr.onload = () => {
      signal?.removeEventListener("abort", abort);
      if (xhr.status >= 200 && xhr.status < 300) {
        try {
          resolve(JSON.parse(xhr.responseText) as UploadResult);
        } catch {
          reject(new ApiError(`${xhr.status} ${xhr.statusText}`.trim(), xhr.status));
        }
        return;
      }
      if (xhr.status === 401) dispatchEvent(new CustomEvent("parley:unauthorized"));
      reject(errorFromXhr(xhr));
    };
    xhr.onerror = () => {
      signal?.removeEventListener("abort", abort);
      reject(new ApiError(t("kb.upload.networkError"), 0, "network_error"));
    };
    xhr.onabort = () => {
      signal?.removeEventListener("abort", abort);
      reject(new DOMException(t("kb.upload.stopped"), "AbortError"));
    };
    if (signal?.aborted) {
      reject(new DOMException(t("kb.upload.stopped"), "AbortError"));
      return;
    }
    signal?.addEventListener("abort", abort);
    xhr.send(form);
  });
}
