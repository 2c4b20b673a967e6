// The chat screens' requests, each a documented route of Parley's API (README "The API",
// "Conversations"). Those that "answer like chat completions" return the chunk stream.
import { api, stream } from "../../api";
import type { Assistant, ConversationDetail, KnowledgeBase, Model, Page } from "../../types";
import type { ContentPart } from "./messages";
import type { Chunk } from "./reply";

const conv = (id: string) => `/v1/conversations/${encodeURIComponent(id)}`;
const msg = (id: string, mid: string) => `${conv(id)}/messages/${encodeURIComponent(mid)}`;

export type Content = string | ContentPart[];
export type Chunks = AsyncGenerator<Chunk>;

/** The picks sent with a turn (absent ones: the server's or the conversation's). */
export interface TurnOptions {
  model?: string;
  assistant?: string;
  knowledge_bases?: string[];
}

export interface Decision {
  tool_call_id: string;
  decision: "approve" | "deny" | "answer";
  reason?: string;
  answer?: string;
  /** On approval: the arguments the person saw (the server refuses others). */
  arguments?: string;
}

function options(picks: TurnOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (picks.model) body.model = picks.model;
  if (picks.assistant) body.assistant = picks.assistant;
  if (picks.knowledge_bases?.length) body.knowledge_bases = picks.knowledge_bases;
  return body;
}

export function getConversation(id: string, signal?: AbortSignal): Promise<ConversationDetail> {
  return api<ConversationDetail>(conv(id), { signal });
}

/** A new message in a stored conversation: only the new message is sent. */
export function sendMessage(id: string, content: Content, picks: TurnOptions, signal: AbortSignal): Promise<Chunks> {
  const body = { ...options(picks), conversation_id: id, messages: [{ role: "user", content }] };
  return stream<Chunk>("/v1/chat/completions", body, signal);
}

/** The first message of a new chat: the conversation is made first (`POST
 * /v1/conversations`, with the picked assistant, which it then keeps) and the message sent
 * to it by id, so that its first reply already gets a title and suggestions (a request
 * without `conversation_id` gets neither: README "Titles and suggestions"). */
export async function startConversation(content: Content, picks: TurnOptions, signal: AbortSignal): Promise<Chunks> {
  const created = await api<{ id: string }>("/v1/conversations", {
    method: "POST",
    body: picks.assistant ? { assistant: picks.assistant } : {},
    signal,
  });
  return sendMessage(created.id, content, picks, signal);
}

export function regenerate(id: string, mid: string, picks: TurnOptions, signal: AbortSignal): Promise<Chunks> {
  return stream<Chunk>(`${msg(id, mid)}/regenerate`, options(picks), signal);
}

export function edit(id: string, mid: string, content: Content, picks: TurnOptions, signal: AbortSignal): Promise<Chunks> {
  return stream<Chunk>(`${msg(id, mid)}/edit`, { ...options(picks), content }, signal);
}

export function decide(id: string, decisions: Decision[], signal: AbortSignal): Promise<Chunks> {
  return stream<Chunk>(`${conv(id)}/approvals`, { decisions }, signal);
}

export function cancelReply(id: string): Promise<unknown> {
  return api(`${conv(id)}/cancel`, { method: "POST", body: {} });
}

export function selectVersion(id: string, mid: string): Promise<ConversationDetail> {
  return api<ConversationDetail>(`${msg(id, mid)}/select`, { method: "POST", body: {} });
}

export function deleteVersion(id: string, mid: string): Promise<ConversationDetail> {
  return api<ConversationDetail>(msg(id, mid), { method: "DELETE" });
}

export function fork(id: string, mid: string): Promise<ConversationDetail> {
  return api<ConversationDetail>(`${conv(id)}/fork`, { method: "POST", body: { message_id: mid } });
}

// --- the rolling context summary --------------------------------------------------------

export interface Summary {
  id: string;
  text: string;
  covers: string[];
  tokens: number;
  model: string;
  instructions: string | null;
  created_at: number;
  reverted_at: number | null;
  applies: boolean;
}

export interface SummaryState {
  conversation_id: string;
  summary: Summary | null;
  history: Summary[];
}

export function getSummary(id: string): Promise<SummaryState> {
  return api<SummaryState>(`${conv(id)}/summary`);
}

export function compact(id: string, instructions?: string): Promise<{ summary: Summary }> {
  return api(`${conv(id)}/compact`, { method: "POST", body: instructions ? { instructions } : {} });
}

export function revertSummary(id: string): Promise<{ reverted: Summary | null; summary: Summary | null }> {
  return api(`${conv(id)}/summary`, { method: "DELETE" });
}

// --- what the pickers offer ------------------------------------------------------------

export async function listModels(): Promise<Model[]> {
  const page = await api<{ data: Model[] }>("/v1/models");
  return page.data;
}

/** Every page of a paged list (at most `pages` of 100). */
async function all<T extends { id: string }>(path: string, pages = 10): Promise<T[]> {
  const items: T[] = [];
  let after: string | undefined;
  for (let i = 0; i < pages; i++) {
    const page = await api<Page<T>>(path, { query: { limit: 100, after } });
    items.push(...page.data);
    if (!page.has_more || !page.data.length) break;
    after = page.data[page.data.length - 1].id;
  }
  return items;
}

export function listAssistants(): Promise<Assistant[]> {
  return all<Assistant>("/v1/assistants");
}

export function listKnowledgeBases(): Promise<KnowledgeBase[]> {
  return all<KnowledgeBase>("/v1/knowledge_bases");
}
