// /assistants: the caller's assistants (presets of prompt, model, sampling, tools and
// their approval policies, knowledge bases, memory, MCP servers); create, edit, delete.
import { useState } from "preact/hooks";
import { api } from "../../api";
import { Confirm } from "../../components/Confirm";
import { ErrorNote } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { AssistantEditor } from "./AssistantEditor";
import { listAll, useLoad } from "./data";
import type { AssistantRecord } from "./types";
import "./settings.css";

type Editing = { mode: "new" } | { mode: "edit"; assistant: AssistantRecord } | null;

export function AssistantsView() {
  const list = useLoad(() => listAll<AssistantRecord>("/v1/assistants"));
  const [editing, setEditing] = useState<Editing>(null);
  const [deleting, setDeleting] = useState<AssistantRecord | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");

  async function remove(assistant: AssistantRecord) {
    setDeleting(null);
    setError(null);
    try {
      await api(`/v1/assistants/${encodeURIComponent(assistant.id)}`, { method: "DELETE" });
      list.set((list.data ?? []).filter((a) => a.id !== assistant.id));
      setNotice(t("assistants.deleted", { name: assistant.name }));
    } catch (caught) {
      setError(caught);
    }
  }

  function saved(assistant: AssistantRecord) {
    const rows = list.data ?? [];
    const exists = rows.some((a) => a.id === assistant.id);
    list.set(exists ? rows.map((a) => (a.id === assistant.id ? assistant : a)) : [assistant, ...rows]);
    setEditing(null);
    setNotice(t("assistants.saved", { name: assistant.name }));
  }

  if (editing) {
    return (
      <section class="page settings-page" aria-labelledby="assistants-heading">
        <h1 id="assistants-heading">
          {editing.mode === "new" ? t("assistants.new") : t("assistants.editTitle", { name: editing.assistant.name })}
        </h1>
        <AssistantEditor
          assistant={editing.mode === "edit" ? editing.assistant : null}
          onSaved={saved}
          onCancel={() => setEditing(null)}
        />
      </section>
    );
  }

  const rows = list.data ?? [];
  return (
    <section class="page settings-page" aria-labelledby="assistants-heading">
      <div class="settings-head">
        <h1 id="assistants-heading">{t("assistants.title")}</h1>
        <button
          type="button"
          class="primary"
          onClick={() => {
            setNotice("");
            setEditing({ mode: "new" });
          }}
        >
          + {t("assistants.new")}
        </button>
      </div>
      <p class="hint">{t("assistants.intro")}</p>
      <p class="visually-hidden" role="status">
        {notice}
      </p>
      {error !== null && <ErrorNote error={error} />}
      {list.error !== null && <ErrorNote error={list.error} onRetry={list.reload} />}
      {list.loading && !list.data && <p class="loading">{t("app.loading")}</p>}
      {list.data && rows.length === 0 && <p class="empty">{t("assistants.empty")}</p>}
      {rows.length > 0 && (
        <ul class="card-list" aria-label={t("assistants.title")}>
          {rows.map((assistant) => (
            <li key={assistant.id} class="card">
              <div class="card-main">
                <h2 class="card-title">{assistant.name}</h2>
                {assistant.description && <p class="card-text">{assistant.description}</p>}
                <p class="card-meta">
                  <span>
                    {t("assistants.model")}: {assistant.model || t("assistants.defaultModel")}
                  </span>
                  {assistant.tools.length > 0 && (
                    <span>
                      {t("assistants.tools")}: {assistant.tools.join(", ")}
                    </span>
                  )}
                  {assistant.knowledge_bases.length > 0 && (
                    <span>
                      {t("assistants.knowledgeBases")}: {assistant.knowledge_bases.length}
                    </span>
                  )}
                  {assistant.memory.enabled && <span>{t("assistants.memoryOn")}</span>}
                </p>
              </div>
              <div class="card-actions">
                <button
                  type="button"
                  aria-label={t("assistants.editNamed", { name: assistant.name })}
                  onClick={() => {
                    setNotice("");
                    setEditing({ mode: "edit", assistant });
                  }}
                >
                  {t("common.edit")}
                </button>
                <button
                  type="button"
                  class="danger"
                  aria-label={t("assistants.deleteNamed", { name: assistant.name })}
                  onClick={() => setDeleting(assistant)}
                >
                  {t("common.delete")}
                </button>
              </div>
            </li>
          ))}
        </ul>
      )}
      {deleting && (
        <Confirm
          message={t("assistants.confirmDelete", { name: deleting.name })}
          onConfirm={() => void remove(deleting)}
          onCancel={() => setDeleting(null)}
        />
      )}
    </section>
  );
}
