// /memory: the caller's long-term memories: list (all, global, or one assistant's),
// search one scope, add, edit in place, delete.
import { useState } from "preact/hooks";
import { api } from "../../api";
import { Confirm } from "../../components/Confirm";
import { ErrorNote } from "../../components/ErrorNote";
import { lang, t } from "../../i18n";
import type { Page } from "../../types";
import { listAll, useLoad, when } from "./data";
import type { MemoryRecord, NamedRecord } from "./types";
import "./settings.css";

const PAGE = 50;
const MAX_CHARS = 2000;
/** the filter: every memory, the global ones, or one assistant's (its id) */
type Filter = "all" | "global" | string;

/** The query of GET /v1/memories for a filter. */
export function memoryQuery(filter: Filter): Record<string, string | undefined> {
  if (filter === "all") return {};
  if (filter === "global") return { scope: "global" };
  return { assistant_id: filter };
}

/** The assistant_id of a search or a new memory (null: global). */
export function scopeId(filter: Filter): string | null {
  return filter === "all" || filter === "global" ? null : filter;
}

/** A short form of a memory for an accessible name. */
export function shortText(text: string, max = 40): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

export function MemoryView() {
  const assistants = useLoad(() => listAll<NamedRecord>("/v1/assistants"));
  const [filter, setFilter] = useState<Filter>("all");
  const [rows, setRows] = useState<MemoryRecord[]>([]);
  const [hasMore, setHasMore] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [query, setQuery] = useState("");
  const [results, setResults] = useState<MemoryRecord[] | null>(null);
  const [searching, setSearching] = useState(false);
  const [notice, setNotice] = useState("");

  const list = useLoad(async () => {
    const page = await api<Page<MemoryRecord>>("/v1/memories", { query: { ...memoryQuery(filter), limit: PAGE } });
    setRows(page.data);
    setHasMore(page.has_more);
    return page.data;
  }, [filter]);

  async function loadMore() {
    try {
      const page = await api<Page<MemoryRecord>>("/v1/memories", {
        query: { ...memoryQuery(filter), limit: PAGE, after: rows[rows.length - 1]?.id },
      });
      const seen = new Set(rows.map((m) => m.id));
      setRows([...rows, ...page.data.filter((m) => !seen.has(m.id))]);
      setHasMore(page.has_more);
    } catch (caught) {
      setError(caught);
    }
  }

  async function search(event: Event) {
    event.preventDefault();
    const text = query.trim();
    if (!text) {
      setResults(null);
      return;
    }
    setSearching(true);
    setError(null);
    try {
      const found = await api<{ data: MemoryRecord[] }>("/v1/memories/search", {
        method: "POST",
        body: { query: text, assistant_id: scopeId(filter), limit: 20 },
      });
      setResults(found.data);
    } catch (caught) {
      setError(caught);
    } finally {
      setSearching(false);
    }
  }

  const names = new Map((assistants.data ?? []).map((a) => [a.id, a.name]));
  const scopeName = (memory: MemoryRecord) =>
    memory.assistant_id === null
      ? t("memory.global")
      : t("memory.ofAssistant", { name: names.get(memory.assistant_id) ?? memory.assistant_id });

  function changed(memory: MemoryRecord) {
    setRows((current) => current.map((m) => (m.id === memory.id ? memory : m)));
    setResults((current) => current && current.map((m) => (m.id === memory.id ? { ...memory, score: m.score } : m)));
    setNotice(t("memory.savedNotice"));
  }
  function removed(memory: MemoryRecord) {
    setRows((current) => current.filter((m) => m.id !== memory.id));
    setResults((current) => current && current.filter((m) => m.id !== memory.id));
    setNotice(t("memory.deletedNotice"));
  }
  function added(memory: MemoryRecord) {
    const fits = filter === "all" || (filter === "global" ? memory.assistant_id === null : memory.assistant_id === filter);
    if (fits) setRows((current) => [memory, ...current.filter((m) => m.id !== memory.id)]);
    setNotice(t("memory.addedNotice"));
  }

  const shown = results ?? rows;
  return (
    <section class="page settings-page" aria-labelledby="memory-heading">
      <h1 id="memory-heading">{t("memory.title")}</h1>
      <p class="hint">{t("memory.intro")}</p>
      <p class="visually-hidden" role="status">
        {notice}
      </p>

      <div class="memory-tools">
        <div class="field">
          <label for="memory-filter">{t("memory.filter")}</label>
          <select
            id="memory-filter"
            value={filter}
            onChange={(e) => {
              setFilter(e.currentTarget.value);
              setResults(null);
            }}
          >
            <option value="all">{t("memory.all")}</option>
            <option value="global">{t("memory.global")}</option>
            {(assistants.data ?? []).map((a) => (
              <option key={a.id} value={a.id}>
                {t("memory.ofAssistant", { name: a.name })}
              </option>
            ))}
          </select>
        </div>
        <form class="memory-search" role="search" onSubmit={search}>
          <label for="memory-query">{t("memory.search")}</label>
          <div class="inline">
            <input
              id="memory-query"
              type="search"
              maxLength={2000}
              value={query}
              aria-describedby="memory-query-hint"
              onInput={(e) => setQuery(e.currentTarget.value)}
            />
            <button type="submit" disabled={searching || !query.trim()}>
              {t("common.search")}
            </button>
            {results && (
              <button
                type="button"
                onClick={() => {
                  setResults(null);
                  setQuery("");
                }}
              >
                {t("memory.clearSearch")}
              </button>
            )}
          </div>
          <p id="memory-query-hint" class="hint">
            {filter === "all" ? t("memory.searchHintAll") : t("memory.searchHint")}
          </p>
        </form>
      </div>

      <AddMemory assistants={assistants.data ?? []} filter={filter} onAdded={added} />

      {error !== null && <ErrorNote error={error} />}
      {list.error !== null && <ErrorNote error={list.error} onRetry={list.reload} />}
      {assistants.error !== null && <ErrorNote error={assistants.error} onRetry={assistants.reload} />}
      {results && (
        <h2 class="subhead">
          {results.length ? t("memory.results", { count: results.length }) : t("memory.noResults")}
        </h2>
      )}
      {list.loading && !results && rows.length === 0 && <p class="loading">{t("app.loading")}</p>}
      {!list.loading && !results && list.error === null && rows.length === 0 && (
        <p class="empty">{t("memory.empty")}</p>
      )}
      {shown.length > 0 && (
        <ul class="card-list memories" aria-label={results ? t("memory.resultsLabel") : t("memory.listLabel")}>
          {shown.map((memory) => (
            <MemoryItem key={memory.id} memory={memory} scope={scopeName(memory)} onChanged={changed} onRemoved={removed} />
          ))}
        </ul>
      )}
      {!results && hasMore && (
        <button type="button" class="more" onClick={() => void loadMore()}>
          {t("common.loadMore")}
        </button>
      )}
    </section>
  );
}

function AddMemory({
  assistants,
  filter,
  onAdded,
}: {
  assistants: NamedRecord[];
  filter: Filter;
  onAdded: (memory: MemoryRecord) => void;
}) {
  const [text, setText] = useState("");
  const [owner, setOwner] = useState<string>("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  // the scope follows the filter until the person picks one
  const chosen = owner || (scopeId(filter) ?? "global");
  async function submit(event: Event) {
    event.preventDefault();
    if (!text.trim()) return;
    setBusy(true);
    setError(null);
    try {
      const memory = await api<MemoryRecord>("/v1/memories", {
        method: "POST",
        body: { text: text.trim(), assistant_id: chosen === "global" ? null : chosen },
      });
      setText("");
      onAdded(memory);
    } catch (caught) {
      setError(caught);
    } finally {
      setBusy(false);
    }
  }
  return (
    <details class="add-memory">
      <summary>{t("memory.add")}</summary>
      <form onSubmit={submit} class="settings-form compact">
        <div class="field wide">
          <label for="memory-new">{t("memory.newText")}</label>
          <textarea
            id="memory-new"
            rows={3}
            maxLength={MAX_CHARS}
            required
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="memory-new-scope">{t("memory.belongsTo")}</label>
          <select id="memory-new-scope" value={chosen} onChange={(e) => setOwner(e.currentTarget.value)}>
            <option value="global">{t("memory.global")}</option>
            {assistants.map((a) => (
              <option key={a.id} value={a.id}>
                {t("memory.ofAssistant", { name: a.name })}
              </option>
            ))}
          </select>
        </div>
        {error !== null && <ErrorNote error={error} />}
        <div class="form-actions">
          <button type="submit" class="primary" disabled={busy || !text.trim()}>
            {t("memory.addButton")}
          </button>
        </div>
      </form>
    </details>
  );
}

function MemoryItem({
  memory,
  scope,
  onChanged,
  onRemoved,
}: {
  memory: MemoryRecord;
  scope: string;
  onChanged: (memory: MemoryRecord) => void;
  onRemoved: (memory: MemoryRecord) => void;
}) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState(memory.text);
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const short = shortText(memory.text);
  const path = `/v1/memories/${encodeURIComponent(memory.id)}`;

  async function save(event: Event) {
    event.preventDefault();
    const text = draft.trim();
    if (!text) return;
    if (text === memory.text) {
      setEditing(false);
      return;
    }
    setBusy(true);
    setError(null);
    try {
      onChanged(await api<MemoryRecord>(path, { method: "PATCH", body: { text } }));
      setEditing(false);
    } catch (caught) {
      setError(caught);
    } finally {
      setBusy(false);
    }
  }
  async function remove() {
    setConfirming(false);
    setError(null);
    try {
      await api(path, { method: "DELETE" });
      onRemoved(memory);
    } catch (caught) {
      setError(caught);
    }
  }

  return (
    <li class="card memory">
      <div class="card-main">
        {editing ? (
          <form onSubmit={save} class="memory-edit">
            <label class="visually-hidden" for={`memory-edit-${memory.id}`}>
              {t("memory.editLabel")}
            </label>
            <textarea
              id={`memory-edit-${memory.id}`}
              rows={3}
              maxLength={MAX_CHARS}
              value={draft}
              ref={(el) => el?.focus()}
              onInput={(e) => setDraft(e.currentTarget.value)}
              onKeyDown={(e) => {
                if (e.key === "Escape") {
                  e.preventDefault();
                  setDraft(memory.text);
                  setEditing(false);
                }
              }}
            />
            <div class="form-actions">
              <button type="submit" class="primary" disabled={busy || !draft.trim()}>
                {t("common.save")}
              </button>
              <button
                type="button"
                onClick={() => {
                  setDraft(memory.text);
                  setEditing(false);
                }}
              >
                {t("common.cancel")}
              </button>
            </div>
          </form>
        ) : (
          <p class="card-text memory-text">{memory.text}</p>
        )}
        <p class="card-meta">
          <span>{scope}</span>
          {memory.source && <span>{t("memory.source", { source: memory.source })}</span>}
          <span>{when(memory.updated_at || memory.created_at, lang.value)}</span>
          {typeof memory.score === "number" && <span>{t("memory.score", { score: memory.score.toFixed(3) })}</span>}
        </p>
        {error !== null && <ErrorNote error={error} />}
      </div>
      {!editing && (
        <div class="card-actions">
          <button
            type="button"
            aria-label={t("memory.editNamed", { text: short })}
            onClick={() => {
              setDraft(memory.text);
              setEditing(true);
            }}
          >
            {t("common.edit")}
          </button>
          <button
            type="button"
            class="danger"
            aria-label={t("memory.deleteNamed", { text: short })}
            onClick={() => setConfirming(true)}
          >
            {t("common.delete")}
          </button>
        </div>
      )}
      {confirming && (
        <Confirm
          message={t("memory.confirmDelete", { text: short })}
          onConfirm={() => void remove()}
          onCancel={() => setConfirming(false)}
        />
      )}
    </li>
  );
}
