// The model (GET /v1/models), assistant (GET /v1/assistants) and knowledge bases
// (GET /v1/knowledge_bases) of the next turn, each a labelled <select>, read when the
// chat screen opens. "Default" sends none: the assistant's model, or the server's default.
// A base deleted since it was picked is dropped from the picks.
import { useEffect, useState } from "preact/hooks";
import { t } from "../../i18n";
import type { Assistant, KnowledgeBase, Model } from "../../types";
import { listAssistants, listKnowledgeBases, listModels, type TurnOptions } from "./chatApi";

interface Choices {
  models: Model[];
  assistants: Assistant[];
  /** null: the list could not be read. */
  bases: KnowledgeBase[] | null;
}

/** What the pickers offer (a list that fails to load is an empty one). */
async function loadChoices(): Promise<Choices> {
  const [models, assistants, bases] = await Promise.all([
    listModels().catch(() => [] as Model[]),
    listAssistants().catch(() => [] as Assistant[]),
    listKnowledgeBases().catch(() => null),
  ]);
  return { models, assistants, bases };
}

interface Props {
  picks: TurnOptions;
  onChange: (picks: TurnOptions) => void;
  disabled?: boolean;
}

/** The value a <select> shows: a pick no longer offered is still shown, so it is not
 * changed silently. */
function withMissing<T extends { id: string }>(items: T[], value: string | undefined, make: (id: string) => T): T[] {
  return value && !items.some((i) => i.id === value) ? [...items, make(value)] : items;
}

export function Pickers({ picks, onChange, disabled }: Props) {
  const [choices, setChoices] = useState<Choices>({ models: [], assistants: [], bases: [] });
  useEffect(() => {
    let live = true;
    void loadChoices().then((loaded) => {
      if (!live) return;
      setChoices(loaded);
      const bases = loaded.bases;
      if (!bases) return;
      const kept = (picks.knowledge_bases ?? []).filter((id) => bases.some((b) => b.id === id));
      if (kept.length !== (picks.knowledge_bases ?? []).length) onChange({ ...picks, knowledge_bases: kept });
    });
    return () => {
      live = false;
    };
  }, []);
  const models = withMissing(choices.models, picks.model, (id) => ({ id, object: "model" }));
  const assistants = withMissing(choices.assistants, picks.assistant, (id) => ({ id, name: id }));
  const selectedBases = picks.knowledge_bases ?? [];
  const bases = choices.bases ?? [];
  return (
    <div class="pickers">
      <label class="picker">
        <span>{t("chat.pick.model")}</span>
        <select
          value={picks.model ?? ""}
          disabled={disabled}
          onChange={(e) => onChange({ ...picks, model: e.currentTarget.value || undefined })}
        >
          <option value="">{t("chat.pick.default")}</option>
          {models.map((m) => (
            <option key={m.id} value={m.id}>
              {m.id}
            </option>
          ))}
        </select>
      </label>
      <label class="picker">
        <span>{t("chat.pick.assistant")}</span>
        <select
          value={picks.assistant ?? ""}
          disabled={disabled}
          onChange={(e) => onChange({ ...picks, assistant: e.currentTarget.value || undefined })}
        >
          <option value="">{t("common.none")}</option>
          {assistants.map((a) => (
            <option key={a.id} value={a.id}>
              {a.name}
            </option>
          ))}
        </select>
      </label>
      <label class="picker picker-bases">
        <span>
          {t("chat.pick.bases")}
          {selectedBases.length > 0 && <span aria-hidden="true"> ({selectedBases.length})</span>}
        </span>
        <select
          multiple
          size={Math.max(1, Math.min(3, bases.length))}
          disabled={disabled || bases.length === 0}
          title={t("chat.pick.basesHint")}
          onChange={(e) =>
            onChange({
              ...picks,
              knowledge_bases: Array.from(e.currentTarget.selectedOptions, (o) => o.value),
            })
          }
        >
          {bases.length === 0 && (
            <option value="" disabled>
              {t("chat.pick.noBases")}
            </option>
          )}
          {bases.map((b) => (
            <option key={b.id} value={b.id} selected={selectedBases.includes(b.id)}>
              {b.name}
            </option>
          ))}
        </select>
      </label>
    </div>
  );
}
