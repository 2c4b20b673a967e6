// The calls a paused reply waits on, one approval card each. Decisions are collected for
// the whole reply and sent together once every call has one (POST .../approvals, streamed):
// the reply then resumes in place.
import { useState } from "preact/hooks";
import { t } from "../../i18n";
import type { PendingApproval } from "../../types";
import type { Decision } from "./chatApi";
import { ApprovalCard } from "../../components/ApprovalCard";

interface Props {
  pending: PendingApproval[];
  disabled: boolean;
  /** Resolves false when the decisions were refused (they can then be made again). */
  onSubmit: (decisions: Decision[]) => Promise<boolean>;
}

/** The decisions in the order of the calls, once every call has one; else null. */
export function complete(pending: readonly PendingApproval[], decided: Record<string, Decision>): Decision[] | null {
  const list: Decision[] = [];
  for (const call of pending) {
    const decision = decided[call.id];
    if (!decision) return null;
    list.push(decision);
  }
  return list;
}

export function Approvals({ pending, disabled, onSubmit }: Props) {
  const [decided, setDecided] = useState<Record<string, Decision>>({});
  const [sending, setSending] = useState(false);
  /** Bumped when refused decisions are to be made again: the cards start afresh. */
  const [round, setRound] = useState(0);
  async function decide(decision: Decision) {
    const next = { ...decided, [decision.tool_call_id]: decision };
    setDecided(next);
    const all = complete(pending, next);
    if (!all) return;
    setSending(true);
    const accepted = await onSubmit(all);
    setSending(false);
    if (!accepted) {
      setDecided({});
      setRound((n) => n + 1);
    }
  }
  const count = Object.keys(decided).length;
  return (
    <section class="approvals" aria-label={t("chat.approval.title")}>
      <p class="approvals-intro">{t("chat.approval.intro", { count: pending.length })}</p>
      {pending.map((call) => (
        <ApprovalCard
          key={`${call.id}:${round}`}
          pending={call}
          disabled={disabled || sending}
          onDecide={(d) => void decide(d)}
        />
      ))}
      {pending.length > 1 && count > 0 && count < pending.length && (
        <p class="hint" role="status">
          {t("chat.approval.progress", { done: count, total: pending.length })}
        </p>
      )}
    </section>
  );
}
