// The conversation's rolling context summary (README "Rolling context"): the current one
// and the earlier ones, "Summarise now" (POST .../compact) and "Revert" (DELETE
// .../summary), in a dialog.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "../../api";
import { ErrorNote } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { compact, getSummary, revertSummary, type Summary, type SummaryState } from "./chatApi";
import { count } from "./format";

interface Props {
  conversationId: string;
  onClose: () => void;
}

function when(seconds: number): string {
  return new Date(seconds * 1000).toLocaleString();
}

function SummaryText({ summary }: { summary: Summary }) {
  return (
    <div class="summary">
      <p class="hint">
        {t("chat.summary.meta", {
          when: when(summary.created_at),
          model: summary.model,
          tokens: count(summary.tokens),
          messages: summary.covers.length,
        })}
        {!summary.applies && ` · ${t("chat.summary.notApplied")}`}
        {summary.reverted_at !== null && ` · ${t("chat.summary.reverted")}`}
      </p>
      {summary.instructions && <p class="hint">{t("chat.summary.instructions", { text: summary.instructions })}</p>}
      <p class="summary-text">{summary.text}</p>
    </div>
  );
}

export function SummaryPanel({ conversationId, onClose }: Props) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [state, setState] = useState<SummaryState | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [instructions, setInstructions] = useState("");

  async function load() {
    try {
      setState(await getSummary(conversationId));
      setError(null);
    } catch (caught) {
      if (caught instanceof ApiError && caught.status === 404) {
        setState({ conversation_id: conversationId, summary: null, history: [] });
      } else {
        setError(caught);
      }
    }
  }

  async function act(work: () => Promise<unknown>) {
    setBusy(true);
    setError(null);
    try {
      await work();
      await load();
    } catch (caught) {
      setError(caught);
    } finally {
      setBusy(false);
    }
  }

  useEffect(() => {
    dialog.current?.showModal();
    void load();
  }, [conversationId]);

  const current = state?.summary ?? null;
  return (
    <dialog ref={dialog} class="dialog summary-panel" onCancel={onClose} aria-labelledby="summary-title">
      <h2 id="summary-title">{t("chat.summary.title")}</h2>
      <p class="hint">{t("chat.summary.about")}</p>
      {state === null && error === null && <p class="loading">{t("app.loading")}</p>}
      {state !== null && (current ? <SummaryText summary={current} /> : <p class="empty">{t("chat.summary.none")}</p>)}
      {state !== null && state.history.length > 0 && (
        <details class="summary-history">
          <summary>{t("chat.summary.history", { count: state.history.length })}</summary>
          {state.history.map((s) => (
            <SummaryText key={s.id} summary={s} />
          ))}
        </details>
      )}
      {busy && <p class="hint" role="status">{t("chat.summary.working")}</p>}
      {error !== null && <ErrorNote error={error} />}
      <label class="summary-instructions">
        <span>{t("chat.summary.instructionsLabel")}</span>
        <textarea rows={2} value={instructions} onInput={(e) => setInstructions(e.currentTarget.value)} />
      </label>
      <div class="dialog-actions">
        <button type="button" disabled={busy || !current} onClick={() => void act(() => revertSummary(conversationId))}>
          {t("chat.summary.revert")}
        </button>
        <button
          type="button"
          class="primary"
          disabled={busy}
          aria-busy={busy}
          onClick={() => void act(() => compact(conversationId, instructions.trim() || undefined))}
        >
          {t("chat.summary.now")}
        </button>
        <button type="button" onClick={onClose}>
          {t("common.close")}
        </button>
      </div>
    </dialog>
  );
}
