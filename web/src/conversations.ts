// The sidebar's list of the caller's conversations: newest first, paged, searchable
// (titles and message text, GET /v1/conversations?q=). The chat view tells it about new
// conversations and titles with `touch`.
import { signal } from "@preact/signals";
import { api } from "./api";
import type { ConversationSummary, Page } from "./types";

const PAGE = 30;

export const conversations = signal<ConversationSummary[]>([]);
export const hasMore = signal(false);
export const loading = signal(false);
export const query = signal("");
let generation = 0;

export async function reload(): Promise<void> {
  const mine = ++generation;
  loading.value = true;
  try {
    const page = await api<Page<ConversationSummary>>("/v1/conversations", {
      query: { limit: PAGE, q: query.value.trim() || undefined },
    });
    if (mine !== generation) return;
    conversations.value = page.data;
    hasMore.value = page.has_more;
  } finally {
    if (mine === generation) loading.value = false;
  }
}

export async function loadMore(): Promise<void> {
  if (loading.value || !hasMore.value) return;
  const list = conversations.value;
  const mine = generation;
  loading.value = true;
  try {
    const page = await api<Page<ConversationSummary>>("/v1/conversations", {
      query: { limit: PAGE, after: list[list.length - 1]?.id, q: query.value.trim() || undefined },
    });
    if (mine !== generation) return;
    const seen = new Set(list.map((c) => c.id));
    conversations.value = [...list, ...page.data.filter((c) => !seen.has(c.id))];
    hasMore.value = page.has_more;
  } finally {
    if (mine === generation) loading.value = false;
  }
}

/** A conversation was created, answered or renamed: put it first with its newest title. */
export function touch(conversation: Pick<ConversationSummary, "id"> & Partial<ConversationSummary>): void {
  const list = conversations.value;
  const old = list.find((c) => c.id === conversation.id);
  const now = Date.now() / 1000;
  const merged: ConversationSummary = {
    object: "conversation",
    title: null,
    created_at: now,
    updated_at: now,
    ...old,
    ...conversation,
  };
  if (query.value.trim() && !old) return;
  conversations.value = [merged, ...list.filter((c) => c.id !== conversation.id)];
}

export async function rename(id: string, title: string): Promise<void> {
  const updated = await api<ConversationSummary>(`/v1/conversations/${encodeURIComponent(id)}`, {
    method: "PATCH",
    body: { title },
  });
  conversations.value = conversations.value.map((c) => (c.id === id ? { ...c, ...updated } : c));
}

export async function remove(id: string): Promise<void> {
  await api(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
  conversations.value = conversations.value.filter((c) => c.id !== id);
}
