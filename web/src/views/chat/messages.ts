// Stored messages (GET /v1/conversations/{id}) as the page shows them: an assistant
// message becomes a ReplyState (the renderer of live replies draws it), a user message its
// text and attachments; and what a conversation cost.
import type { PendingApproval, StoredMessage, Usage } from "../../types";
import { emptyReply, type ApprovalState, type ReplyError, type ReplyState } from "./reply";

/** A stored assistant message as a finished reply. */
export function storedReply(message: StoredMessage): ReplyState {
  const state = emptyReply();
  state.phase = "done";
  state.conversationId = null;
  state.messageId = message.id;
  state.model = message.model;
  for (const part of message.parts) {
    switch (part.kind) {
      case "text":
        if (part.text) state.segments.push({ kind: "text", text: part.text, live: 0 });
        break;
      case "reasoning":
        if (part.text) state.segments.push({ kind: "reasoning", text: part.text, live: false });
        break;
      case "image":
        state.segments.push({ kind: "image", url: part.url });
        break;
      case "tool_call":
        state.segments.push({ kind: "tool", id: part.id });
        state.tools[part.id] = {
          id: part.id,
          name: part.name,
          arguments: part.arguments,
          output: part.result?.content ?? null,
          isError: Boolean(part.result?.is_error),
          seconds: part.result?.seconds ?? null,
          running: false,
          approval: (part.approval as ApprovalState | null | undefined) ?? null,
          approvalReason: part.approval_reason ?? null,
        };
        break;
      default:
        break;
    }
  }
  state.citations = message.citations ?? [];
  state.pending = message.status === "awaiting_approval" ? pendingApprovals(message) : [];
  state.error = storedError(message.error);
  if (state.error && message.status === "complete") {
    state.stopped = { code: state.error.code ?? "stopped", message: state.error.message };
    state.error = null;
  }
  state.finishReason = message.finish_reason;
  state.usage = tokens(message.usage);
  return state;
}

/** The calls a paused reply waits on: the stored list (with expiry) when the server gives
 * it, else its tool calls still pending with no result. */
export function pendingApprovals(message: StoredMessage): PendingApproval[] {
  if (message.pending_approvals) return message.pending_approvals;
  const pending: PendingApproval[] = [];
  for (const part of message.parts) {
    if (part.kind === "tool_call" && part.approval === "pending" && !part.result) {
      pending.push({ id: part.id, tool: part.name, arguments: part.arguments });
    }
  }
  return pending;
}

export function storedError(error: StoredMessage["error"]): ReplyError | null {
  if (!error) return null;
  if (typeof error === "string") return { message: error, code: null };
  const message = typeof error.message === "string" ? error.message : null;
  const code = typeof error.code === "string" ? error.code : null;
  return message || code ? { message: message ?? code ?? "", code } : null;
}

function tokens(usage: Usage | null): ReplyState["usage"] {
  if (!usage) return null;
  return { input: Number(usage.input_tokens ?? 0), output: Number(usage.output_tokens ?? 0) };
}

// --- user messages -------------------------------------------------------------------

export interface ImageRef {
  url: string;
}

export interface FileRef {
  name: string;
  mediaType: string | null;
  data: string;
}

export interface UserView {
  text: string;
  images: ImageRef[];
  files: FileRef[];
}

export function userView(message: Pick<StoredMessage, "parts" | "content">): UserView {
  const images: ImageRef[] = [];
  const files: FileRef[] = [];
  const texts: string[] = [];
  for (const part of message.parts) {
    if (part.kind === "text") texts.push(part.text);
    else if (part.kind === "image") images.push({ url: part.url });
    else if (part.kind === "file") files.push({ name: part.name, mediaType: part.media_type ?? null, data: part.data });
  }
  return { text: texts.length ? texts.join("") : message.content, images, files };
}

/** An image the page may show: one Parley serves (`/v1/files/{id}`) or a data URL of an
 * image. Anything else (another site) is not loaded. */
export function displayableImage(url: string): boolean {
  if (/^data:image\/(png|jpe?g|gif|webp|avif|bmp);/i.test(url)) return true;
  return url.startsWith("/v1/files/") && !url.includes("..");
}

/** A user message's content as a chat message holds it, with `text` in place of its text:
 * what an edit sends, so the message keeps its images and documents. */
export function editedContent(message: StoredMessage, text: string): string | ContentPart[] {
  const rest: ContentPart[] = [];
  for (const part of message.parts) {
    if (part.kind === "image") rest.push({ type: "image_url", image_url: { url: part.url } });
    else if (part.kind === "file") {
      const data = part.data.startsWith("data:") ? part.data : `data:${part.media_type || "application/octet-stream"};base64,${part.data}`;
      rest.push({ type: "file", file: { filename: part.name, file_data: data } });
    }
  }
  return rest.length ? [{ type: "text", text }, ...rest] : text;
}

export type ContentPart =
  | { type: "text"; text: string }
  | { type: "image_url"; image_url: { url: string } }
  | { type: "file"; file: { filename: string; file_data: string } };

// --- cost ----------------------------------------------------------------------------

export interface Spend {
  usd: number;
  /** False when a model without a price answered (the figure is then a lower bound). */
  complete: boolean;
}

export function messageSpend(usage: Usage | null): Spend | null {
  if (!usage || typeof usage.response_usd !== "number") return null;
  return { usd: usage.response_usd, complete: usage.complete !== false };
}

/** What the branch shown cost: the sum of its replies' costs. */
export function branchSpend(messages: readonly StoredMessage[]): Spend {
  let usd = 0;
  let complete = true;
  for (const message of messages) {
    const spend = messageSpend(message.usage);
    if (!spend) continue;
    usd += spend.usd;
    complete &&= spend.complete;
  }
  return { usd, complete };
}

export function needsRetry(status: string): boolean {
  return status === "failed" || status === "interrupted" || status === "incomplete";
}
