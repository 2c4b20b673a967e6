// A tool call waiting for a person (README "Tool approval"): approve it, deny it with an
// optional reason, or answer in the tool's place. The card reports one decision through
// onDecide and then shows it as decided; the chat view batches the decisions of a turn
// and posts them (a parent that must let the person decide again remounts it with a new
// key). A call that waited past the server's approval time can only be denied or
// answered, so Approve is then disabled, with the reason next to it.
import { useEffect, useId, useRef, useState } from "preact/hooks";
import { t } from "../i18n";
import type { PendingApproval } from "../types";
import { prettyText } from "./ToolCard";
import "./message.css";

export interface ApprovalDecision {
  tool_call_id: string;
  decision: "approve" | "deny" | "answer";
  reason?: string;
  answer?: string;
  /** On approval: the arguments the person saw (the server refuses others). */
  arguments?: string;
}

export interface ApprovalCardProps {
  pending: PendingApproval;
  disabled?: boolean;
  onDecide: (decision: ApprovalDecision) => void;
}

type Mode = "choose" | "deny" | "answer";

/** Unix time (seconds; milliseconds tolerated) as milliseconds. */
function toMillis(time: number): number {
  return time > 1e12 ? time : time * 1000;
}

/** 299 -> "4:59", 3723 -> "1:02:03". */
export function formatRemaining(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const pad = (n: number) => String(n).padStart(2, "0");
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  return hours ? `${hours}:${pad(minutes)}:${pad(s % 60)}` : `${minutes}:${pad(s % 60)}`;
}

/** Seconds left before `expiresAt`, ticking each second while `active`; null: no limit. */
function useRemaining(expiresAt: number | null | undefined, active: boolean): number | null {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (!expiresAt || !active) return;
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [expiresAt, active]);
  if (!expiresAt) return null;
  return Math.max(0, Math.ceil((toMillis(expiresAt) - now) / 1000));
}

function decidedText(decision: ApprovalDecision): string {
  if (decision.decision === "approve") return t("msg.approval.approved");
  if (decision.decision === "deny") {
    return decision.reason
      ? t("msg.approval.deniedReason", { reason: decision.reason })
      : t("msg.approval.denied");
  }
  return t("msg.approval.answered", { answer: decision.answer ?? "" });
}

export function ApprovalCard({ pending, disabled = false, onDecide }: ApprovalCardProps) {
  const [mode, setMode] = useState<Mode>("choose");
  const [decided, setDecided] = useState<ApprovalDecision | null>(null);
  const [reason, setReason] = useState("");
  const [answer, setAnswer] = useState("");
  const remaining = useRemaining(pending.expires_at, decided === null && !pending.expired);
  const expired = pending.expired === true || remaining === 0;
  const hintId = useId();
  const field = useRef<HTMLInputElement & HTMLTextAreaElement>(null);
  const denyButton = useRef<HTMLButtonElement>(null);
  const answerButton = useRef<HTMLButtonElement>(null);

  // A new call in the same place starts afresh.
  useEffect(() => {
    setMode("choose");
    setDecided(null);
    setReason("");
    setAnswer("");
  }, [pending.id]);
  // The reason or answer field takes the focus when it opens.
  useEffect(() => {
    if (mode !== "choose") field.current?.focus();
  }, [mode]);

  function decide(decision: ApprovalDecision): void {
    setDecided(decision);
    onDecide(decision);
  }
  function back(): void {
    const trigger = mode === "deny" ? denyButton : answerButton;
    setMode("choose");
    requestAnimationFrame(() => trigger.current?.focus());
  }
  function onKeyDown(event: KeyboardEvent): void {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation(); // Esc here closes the field; it does not stop a reply
      back();
    }
  }

  const id = pending.id;
  return (
    <article
      class={`approval-card${expired ? " expired" : ""}${decided ? " decided" : ""}`}
      aria-label={t("msg.approval.label", { tool: pending.tool })}
    >
      <header class="approval-head">
        <strong>{t("msg.approval.title", { tool: pending.tool })}</strong>
        {!decided && (expired || remaining !== null) && (
          <span class="approval-timer">
            {expired
              ? t("msg.approval.expired")
              : t("msg.approval.expiresIn", { time: formatRemaining(remaining!) })}
          </span>
        )}
      </header>
      {pending.arguments.trim() !== "" && <pre class="tool-pre">{prettyText(pending.arguments)}</pre>}

      {decided ? (
        <p class="approval-decided" role="status">
          {decidedText(decided)}
        </p>
      ) : mode === "choose" ? (
        <>
          <div class="approval-actions">
            <button
              type="button"
              class="primary"
              disabled={disabled || expired}
              aria-describedby={expired ? hintId : undefined}
              onClick={() => decide({ tool_call_id: id, decision: "approve", arguments: pending.arguments })}
            >
              {t("msg.approval.approve")}
            </button>
            <button
              type="button"
              class="danger"
              ref={denyButton}
              disabled={disabled}
              onClick={() => setMode("deny")}
            >
              {t("msg.approval.deny")}
            </button>
            <button type="button" ref={answerButton} disabled={disabled} onClick={() => setMode("answer")}>
              {t("msg.approval.answer")}
            </button>
          </div>
          {expired && (
            <p class="hint" id={hintId}>
              {t("msg.approval.expiredHelp")}
            </p>
          )}
        </>
      ) : mode === "deny" ? (
        <form
          class="approval-form"
          onKeyDown={onKeyDown}
          onSubmit={(event) => {
            event.preventDefault();
            const text = reason.trim();
            decide({ tool_call_id: id, decision: "deny", ...(text ? { reason: text } : {}) });
          }}
        >
          <label>
            {t("msg.approval.reason")}
            <input
              ref={field}
              value={reason}
              maxLength={2000}
              disabled={disabled}
              onInput={(event) => setReason(event.currentTarget.value)}
            />
          </label>
          <div class="approval-actions">
            <button type="submit" class="danger" disabled={disabled}>
              {t("msg.approval.deny")}
            </button>
            <button type="button" onClick={back}>
              {t("common.cancel")}
            </button>
          </div>
        </form>
      ) : (
        <form
          class="approval-form"
          onKeyDown={onKeyDown}
          onSubmit={(event) => {
            event.preventDefault();
            if (answer.trim()) decide({ tool_call_id: id, decision: "answer", answer });
          }}
        >
          <label>
            {t("msg.approval.answerLabel")}
            <textarea
              ref={field}
              rows={3}
              value={answer}
              required
              disabled={disabled}
              aria-describedby={`${hintId}-answer`}
              onInput={(event) => setAnswer(event.currentTarget.value)}
            />
          </label>
          <p class="hint" id={`${hintId}-answer`}>
            {t("msg.approval.answerHelp")}
          </p>
          <div class="approval-actions">
            <button type="submit" class="primary" disabled={disabled || !answer.trim()}>
              {t("msg.approval.sendAnswer")}
            </button>
            <button type="button" onClick={back}>
              {t("common.cancel")}
            </button>
          </div>
        </form>
      )}
    </article>
  );
}
