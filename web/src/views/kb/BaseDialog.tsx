// Create a knowledge base, or rename one (name and description): a native modal
// <dialog> with labelled fields; the server's refusal (a name taken, a name with "/")
// is shown in the dialog as it said it.
import { useEffect, useRef, useState } from "preact/hooks";
import { ErrorNote } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { createBase, updateBase, type KnowledgeBase } from "./kbApi";

interface Props {
  /** The base to rename; none to create one. */
  base?: KnowledgeBase;
  onDone: (base: KnowledgeBase) => void;
  onCancel: () => void;
}

export function BaseDialog({ base, onDone, onCancel }: Props) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [name, setName] = useState(base?.name ?? "");
  const [description, setDescription] = useState(base?.description ?? "");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const title = base ? t("kb.edit") : t("kb.new");

  useEffect(() => {
    const element = dialog.current;
    if (element && !element.open) element.showModal?.();
  }, []);

  async function submit(event: Event) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const saved = base
        ? await updateBase(base.id, {
            ...(name.trim() !== base.name ? { name: name.trim() } : {}),
            ...(description !== base.description ? { description } : {}),
          })
        : await createBase(name.trim(), description);
      onDone(saved);
    } catch (caught) {
      setError(caught);
      setBusy(false);
    }
  }

  const idPrefix = base ? `kb-edit-${base.id}` : "kb-new";
  return (
    <dialog
      ref={dialog}
      class="dialog kb-dialog"
      aria-labelledby={`${idPrefix}-title`}
      onCancel={(event) => {
        event.preventDefault();
        onCancel();
      }}
    >
      <form class="kb-form" onSubmit={submit}>
        <h2 id={`${idPrefix}-title`}>{title}</h2>
        <label for={`${idPrefix}-name`}>{t("kb.name")}</label>
        <input
          id={`${idPrefix}-name`}
          name="name"
          required
          maxLength={100}
          autoComplete="off"
          aria-describedby={`${idPrefix}-name-help`}
          value={name}
          onInput={(e) => setName(e.currentTarget.value)}
        />
        <span id={`${idPrefix}-name-help`} class="hint">
          {t("kb.nameHelp")}
        </span>
        <label for={`${idPrefix}-description`}>{t("kb.description")}</label>
        <textarea
          id={`${idPrefix}-description`}
          name="description"
          rows={3}
          maxLength={2000}
          value={description}
          onInput={(e) => setDescription(e.currentTarget.value)}
        />
        {error !== null && <ErrorNote error={error} />}
        <div class="dialog-actions">
          <button type="button" onClick={onCancel}>
            {t("common.cancel")}
          </button>
          <button type="submit" class="primary" disabled={busy || !name.trim()}>
            {base ? t("common.save") : t("kb.create")}
          </button>
        </div>
      </form>
    </dialog>
  );
}
