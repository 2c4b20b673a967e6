// The state of one assistant reply, as a small typed state machine: chunks of a
// chat-completions stream go in (`applyChunks`), the reply as the page shows it comes out.
// The same shape describes a stored reply (messages.ts `storedReply`), so one renderer
// draws both, and a reply that resumes after approvals carries on from its stored state.
//
// Text, reasoning and tool calls are kept as ordered segments: a tool card sits between
// the text written before it and the text written after it, as the agent produced them.
import type { ChatChunk, Citation, Cost, ParleyExtension, PendingApproval, ToolProgress } from "../../types";

export type ApprovalState = "auto" | "pending" | "approved" | "denied" | "answered";

export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
  output: string | null;
  isError: boolean;
  seconds: number | null;
  running: boolean;
  approval?: ApprovalState | null;
  /** Why it was denied (the person's reason, "policy" ...). */
  approvalReason?: string | null;
}

export type Segment =
  | { kind: "text"; text: string; live: number }
  | { kind: "reasoning"; text: string; live: boolean }
  | { kind: "tool"; id: string }
  /** An image the reply holds as a part (a stored reply's; the stream sends Markdown). */
  | { kind: "image"; url: string };

export type Phase = "waiting" | "streaming" | "done" | "error" | "cancelled";

export interface ReplyError {
  message: string;
  code: string | null;
}

export interface ReplyState {
  phase: Phase;
  conversationId: string | null;
  messageId: string | null;
  model: string | null;
  segments: Segment[];
  tools: Record<string, ToolCall>;
  /** Code points of answer text this stream sent (a restart's `keep_content_chars`
   * counts them as the server does). */
  streamedChars: number;
  pending: PendingApproval[];
  citations: Citation[];
  notes: string[];
  cost: Cost | null;
  usage: { input: number; output: number } | null;
  stopped: { code: string; message: string } | null;
  finishReason: string | null;
  /** What the agent is doing now (`parley.status`, e.g. "thinking" before a later step). */
  activity: string | null;
  error: ReplyError | null;
}

/** A chunk as Parley streams it (with the progress `status` the shared type leaves out). */
export type Chunk = Omit<ChatChunk, "parley"> & {
  parley?: ParleyExtension & { status?: { name: string; detail?: unknown } };
};

export function emptyReply(): ReplyState {
  return {
    phase: "waiting",
    conversationId: null,
    messageId: null,
    model: null,
    segments: [],
    tools: {},
    streamedChars: 0,
    pending: [],
    citations: [],
    notes: [],
    cost: null,
    usage: null,
    stopped: null,
    finishReason: null,
    activity: null,
    error: null,
  };
}

/** The state after `chunks`, as one new object (the input is left as it was). Called
 * once per animation frame with every chunk that arrived since the last one. */
export function applyChunks(state: ReplyState, chunks: readonly Chunk[]): ReplyState {
  if (!chunks.length) return state;
  const draft = copy(state);
  for (const chunk of chunks) applyChunk(draft, chunk);
  return draft;
}

/** One chunk (tests, and callers with a single chunk). */
export function reduce(state: ReplyState, chunk: Chunk): ReplyState {
  return applyChunks(state, [chunk]);
}

/** The reply ended with `[DONE]` (or its stream closed). */
export function finish(state: ReplyState): ReplyState {
  if (state.phase === "error" || state.phase === "cancelled") return state;
  return { ...state, phase: "done", activity: null, tools: settleTools(state.tools) };
}

/** The reply failed: before it began (an HTTP error) or mid-stream (an error event). */
export function fail(state: ReplyState, error: ReplyError): ReplyState {
  return { ...state, phase: "error", activity: null, error, tools: settleTools(state.tools) };
}

/** The person stopped the reply (Stop, Esc). */
export function cancel(state: ReplyState): ReplyState {
  if (state.phase === "done" || state.phase === "error") return state;
  return { ...state, phase: "cancelled", activity: null, tools: settleTools(state.tools) };
}

/** A paused reply carries on: decided calls take their new approval state, nothing is
 * pending any more, and new chunks append to what is shown. */
export function resume(
  state: ReplyState,
  decided: Record<string, { approval: ApprovalState; reason?: string | null }>,
): ReplyState {
  const tools: Record<string, ToolCall> = {};
  for (const [id, call] of Object.entries(state.tools)) {
    const decision = decided[id];
    tools[id] = decision ? { ...call, approval: decision.approval, approvalReason: decision.reason ?? null } : call;
  }
  return {
    ...state,
    phase: "waiting",
    tools,
    pending: [],
    streamedChars: 0,
    finishReason: null,
    error: null,
    stopped: null,
    segments: state.segments.map(settled),
  };
}

/** A segment as stored: nothing of it came from the stream now running. */
function settled(segment: Segment): Segment {
  if (segment.kind === "text") return segment.live ? { ...segment, live: 0 } : segment;
  if (segment.kind === "reasoning") return segment.live ? { ...segment, live: false } : segment;
  return segment;
}

export function isRunning(state: ReplyState): boolean {
  return state.phase === "waiting" || state.phase === "streaming";
}

// --- one chunk -----------------------------------------------------------------------

function copy(state: ReplyState): ReplyState {
  return { ...state, segments: state.segments.slice(), tools: { ...state.tools } };
}

function applyChunk(draft: ReplyState, chunk: Chunk): void {
  const parley = chunk.parley;
  if (draft.phase === "waiting") draft.phase = "streaming";
  if (parley) {
    draft.conversationId ??= parley.conversation_id;
    draft.messageId = parley.message_id ?? draft.messageId;
    if (parley.restart) restart(draft, parley.restart);
    if (parley.tool) tool(draft, parley.tool);
    if (parley.status) draft.activity = parley.status.name;
  }
  if (chunk.model) draft.model = chunk.model;
  for (const choice of chunk.choices ?? []) {
    const delta = choice.delta ?? {};
    if (delta.reasoning_content) appendReasoning(draft, delta.reasoning_content);
    if (delta.content) appendText(draft, delta.content);
    if (choice.finish_reason) draft.finishReason = choice.finish_reason;
  }
  if (parley) summary(draft, parley);
  if (chunk.usage) {
    draft.usage = { input: chunk.usage.prompt_tokens, output: chunk.usage.completion_tokens };
  }
}

function summary(draft: ReplyState, parley: ParleyExtension): void {
  if (parley.citations) draft.citations = parley.citations;
  if (parley.notes) draft.notes = parley.notes;
  if (parley.cost) draft.cost = parley.cost;
  if (parley.pending_approvals) draft.pending = parley.pending_approvals;
  if (parley.stopped) draft.stopped = parley.stopped;
}

function appendText(draft: ReplyState, text: string): void {
  draft.activity = null;
  const chars = codePoints(text);
  draft.streamedChars += chars;
  const last = draft.segments[draft.segments.length - 1];
  if (last?.kind === "text") {
    draft.segments[draft.segments.length - 1] = { kind: "text", text: last.text + text, live: last.live + chars };
  } else {
    draft.segments.push({ kind: "text", text, live: chars });
  }
}

function appendReasoning(draft: ReplyState, text: string): void {
  draft.activity = null;
  const last = draft.segments[draft.segments.length - 1];
  if (last?.kind === "reasoning" && last.live) {
    draft.segments[draft.segments.length - 1] = { kind: "reasoning", text: last.text + text, live: true };
  } else {
    draft.segments.push({ kind: "reasoning", text, live: true });
  }
}

function tool(draft: ReplyState, progress: ToolProgress): void {
  const known = draft.tools[progress.id];
  if (!known) draft.segments.push({ kind: "tool", id: progress.id });
  const base: ToolCall = known ?? {
    id: progress.id,
    name: progress.name,
    arguments: progress.arguments,
    output: null,
    isError: false,
    seconds: null,
    running: false,
  };
  draft.tools[progress.id] =
    progress.phase === "start"
      ? { ...base, name: progress.name, arguments: progress.arguments, running: true }
      : {
          ...base,
          name: progress.name,
          arguments: progress.arguments,
          running: false,
          output: progress.tool_output ?? null,
          isError: Boolean(progress.is_error),
          seconds: progress.seconds ?? null,
        };
}

/** The answer starts over (a retry or a fallback model). With `clear`, what the abandoned
 * attempt showed goes: this step's reasoning, and the text past `keep_content_chars`. */
function restart(draft: ReplyState, event: NonNullable<ParleyExtension["restart"]>): void {
  if (!event.clear) return;
  const keep = Math.max(0, event.keep_content_chars ?? 0);
  let excess = draft.streamedChars - keep;
  const segments = draft.segments;
  const lastTool = segments.map((s) => s.kind).lastIndexOf("tool");
  for (let i = segments.length - 1; i >= 0; i--) {
    const segment = segments[i];
    if (segment.kind === "reasoning" && segment.live && i > lastTool) {
      segments.splice(i, 1);
    } else if (segment.kind === "text" && segment.live && excess > 0) {
      const cut = Math.min(excess, segment.live);
      excess -= cut;
      const text = dropLastCodePoints(segment.text, cut);
      if (text) segments[i] = { kind: "text", text, live: segment.live - cut };
      else segments.splice(i, 1);
    }
  }
  draft.streamedChars = Math.min(draft.streamedChars, keep);
  draft.activity = null;
}

function settleTools(tools: Record<string, ToolCall>): Record<string, ToolCall> {
  if (!Object.values(tools).some((t) => t.running)) return tools;
  const settled: Record<string, ToolCall> = {};
  for (const [id, call] of Object.entries(tools)) settled[id] = call.running ? { ...call, running: false } : call;
  return settled;
}

// --- text as the server counts it (code points, not UTF-16 units) -------------------------

export function codePoints(text: string): number {
  let count = text.length;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        count--;
        i++;
      }
    }
  }
  return count;
}

export function dropLastCodePoints(text: string, count: number): string {
  if (count <= 0) return text;
  const points = Array.from(text);
  return points.slice(0, Math.max(0, points.length - count)).join("");
}
