// One tool call of a reply (a server or MCP tool): its name, its arguments, whether it
// runs, how long it took, its output (collapsed when long), an error in red, and what a
// person decided when the call needed approval. Everything is shown as text, never HTML.
import { useState } from "preact/hooks";
import { t } from "../i18n";
import type { Part } from "../types";
import { formatSeconds } from "./Reasoning";
import "./message.css";

export type ApprovalState = "auto" | "pending" | "approved" | "denied" | "answered";

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as the model wrote them (JSON, usually). */
  arguments: string;
  output?: string | null;
  isError?: boolean;
  seconds?: number | null;
  running?: boolean;
  approval?: { state: ApprovalState; reason?: string | null } | null;
}

type ToolCallPart = Extract<Part, { kind: "tool_call" }>;

/** A stored message's tool_call part as a card's call. */
export function toolCallFromPart(part: ToolCallPart): ToolCall {
  return {
    id: part.id,
    name: part.name,
    arguments: part.arguments,
    output: part.result?.content ?? null,
    isError: part.result?.is_error ?? false,
    seconds: part.result?.seconds ?? null,
    running: false,
    approval: part.approval
      ? { state: part.approval as ApprovalState, reason: part.approval_reason ?? null }
      : null,
  };
}

/** JSON pretty-printed (two spaces); anything else as it is. */
export function prettyText(text: string): string {
  const trimmed = text.trim();
  if (!trimmed.startsWith("{") && !trimmed.startsWith("[")) return text;
  try {
    return JSON.stringify(JSON.parse(trimmed), null, 2);
  } catch {
    return text;
  }
}

export const MAX_LINES = 12;
export const MAX_CHARS = 1200;

/** The start of a long text (more than MAX_LINES lines or MAX_CHARS characters) with an
 *  ellipsis, or null when the text is short enough to show whole. */
export function clipText(text: string, maxLines = MAX_LINES, maxChars = MAX_CHARS): string | null {
  const lines = text.split("\n");
  if (lines.length <= maxLines && text.length <= maxChars) return null;
  return `${lines.slice(0, maxLines).join("\n").slice(0, maxChars).trimEnd()}\n…`;
}

export function formatDuration(seconds: number): string {
  if (seconds < 0.1) return t("msg.tool.seconds", { seconds: "<0.1" });
  if (seconds < 60) return t("msg.tool.seconds", { seconds: formatSeconds(seconds) });
  return t("msg.tool.minutes", {
    minutes: Math.floor(seconds / 60),
    seconds: Math.round(seconds % 60),
  });
}

/** A text block that shows its start when long, with "Show all" / "Show less". */
export function LongText({ text, error = false }: { text: string; error?: boolean }) {
  const [whole, setWhole] = useState(false);
  const clipped = clipText(text);
  return (
    <div class="tool-text">
      <pre class={error ? "tool-pre error" : "tool-pre"}>{whole || clipped === null ? text : clipped}</pre>
      {clipped !== null && (
        <button type="button" class="link" aria-expanded={whole} onClick={() => setWhole(!whole)}>
          {whole ? t("msg.tool.showLess") : t("msg.tool.showAll")}
        </button>
      )}
    </div>
  );
}

/** What a person decided about the call, as a sentence (null: nothing to say). */
export function approvalText(approval: ToolCall["approval"]): string | null {
  if (!approval) return null;
  const reason = approval.reason?.trim();
  switch (approval.state) {
    case "pending":
      return t("msg.tool.pending");
    case "approved":
      return t("msg.tool.approved");
    case "answered":
      return t("msg.tool.answered");
    case "denied":
      if (reason === "policy") return t("msg.tool.deniedByPolicy");
      if (reason === "not decided") return t("msg.tool.notDecided");
      return reason ? t("msg.tool.denied", { reason }) : t("msg.tool.deniedNoReason");
    default:
      return null;
  }
}

function Status({ call }: { call: ToolCall }) {
  if (call.running) {
    return (
      <span class="tool-status">
        <span class="spinner" aria-hidden="true" />
        {t("msg.tool.running")}
      </span>
    );
  }
  return (
    <span class="tool-status">
      {call.isError && <span class="tool-badge error">{t("msg.tool.error")}</span>}
      {/* 0: it never ran (denied, answered) */}
      {call.seconds != null && call.seconds > 0 && (
        <span class="tool-time">{formatDuration(call.seconds)}</span>
      )}
    </span>
  );
}

export function ToolCard({ call }: { call: ToolCall }) {
  const decided = approvalText(call.approval);
  const classes = ["tool-card", call.running ? "running" : "", call.isError ? "error" : ""];
  const hasOutput = !call.running && call.output != null && call.output !== "";
  return (
    <article
      class={classes.filter(Boolean).join(" ")}
      aria-label={t("msg.tool.label", { name: call.name })}
      aria-busy={call.running ? "true" : undefined}
    >
      <header class="tool-head">
        <code class="tool-name">{call.name}</code>
        <Status call={call} />
      </header>
      {decided && (
        <p class={call.approval?.state === "denied" ? "tool-approval denied" : "tool-approval"}>
          {decided}
        </p>
      )}
      {call.arguments.trim() !== "" && (
        <section class="tool-section">
          <h4 class="tool-label">{t("msg.tool.arguments")}</h4>
          <LongText text={prettyText(call.arguments)} />
        </section>
      )}
      {hasOutput && (
        <section class="tool-section">
          <h4 class="tool-label">{t("msg.tool.output")}</h4>
          <LongText text={prettyText(call.output!)} error={call.isError} />
        </section>
      )}
    </article>
  );
}
