// /kb: the caller's knowledge bases (newest first), each with its documents and how far
// their indexing is; create, rename, delete. A base's status comes from its documents'
// counts per status (one small request per base), polled while it is indexing.
import { useEffect, useRef, useState } from "preact/hooks";
import { Confirm } from "../../components/Confirm";
import { ErrorNote } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { navigate, onLinkClick } from "../../router";
import { BaseDialog } from "./BaseDialog";
import { formatNumber } from "./format";
import { deleteBase, listBases, statusCounts, type KnowledgeBase, type StatusCounts } from "./kbApi";
import { poll } from "./poll";
import { baseProgress, countsPending } from "./progress";
import { dropUploads } from "./uploads";

/** What the list says of a base's documents. */
export function baseStatusText(counts: StatusCounts | undefined): string {
  if (!counts) return t("kb.baseStatus.loading");
  const p = baseProgress(counts, []);
  if (!p.total) return t("kb.baseStatus.empty");
  const parts = [
    countsPending(counts)
      ? t("kb.baseStatus.indexing", {
          done: formatNumber(p.ready + p.failed + p.cancelled),
          total: formatNumber(p.total),
        })
      : t("kb.baseStatus.ready"),
  ];
  if (p.failed) parts.push(t("kb.baseStatus.failed", { count: formatNumber(p.failed) }));
  if (p.cancelled) parts.push(t("kb.baseStatus.cancelled", { count: formatNumber(p.cancelled) }));
  return parts.join(" · ");
}

/** Each base's counts, read once, then again every 2 s for those indexing. */
function useCounts(bases: KnowledgeBase[]): Record<string, StatusCounts> {
  const [counts, setCounts] = useState<Record<string, StatusCounts>>({});
  const current = useRef(counts);
  current.current = counts;
  const ids = bases.map((base) => base.id).join(" ");
  useEffect(() => {
    const controller = new AbortController();
    const wanted = ids ? ids.split(" ") : [];
    const read = async (id: string, signal: AbortSignal) => {
      const value = await statusCounts(id, signal);
      if (!signal.aborted) setCounts((old) => ({ ...old, [id]: value }));
      return value;
    };
    // a few at a time: a long list must not open dozens of requests at once
    const queue = wanted.filter((id) => !current.current[id]);
    const worker = async () => {
      for (let id = queue.shift(); id; id = queue.shift()) {
        await read(id, controller.signal).catch(() => undefined);
      }
    };
    let stop: (() => void) | null = null;
    void Promise.all([worker(), worker(), worker(), worker()]).then(() => {
      if (controller.signal.aborted) return;
      stop = poll(
        async (signal) => {
          const busy = wanted.filter((id) => countsPending(current.current[id] ?? {}) > 0);
          const after = await Promise.all(busy.map((id) => read(id, signal)));
          return after.some((value) => countsPending(value) > 0);
        },
        { interval: 2000 },
      );
    });
    return () => {
      controller.abort();
      stop?.();
    };
  }, [ids]);
  return counts;
}

export function BaseList() {
  const [bases, setBases] = useState<KnowledgeBase[]>([]);
  const [hasMore, setHasMore] = useState(false);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<unknown>(null);
  const [creating, setCreating] = useState(false);
  const [editing, setEditing] = useState<KnowledgeBase | null>(null);
  const [deleting, setDeleting] = useState<KnowledgeBase | null>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const counts = useCounts(bases);

  async function load(after?: string) {
    setLoading(true);
    setError(null);
    try {
      const page = await listBases(after);
      setBases((old) => (after ? [...old, ...page.data] : page.data));
      setHasMore(page.has_more);
    } catch (caught) {
      setError(caught);
    } finally {
      setLoading(false);
    }
  }

  useEffect(() => {
    void load();
  }, []);

  async function remove(base: KnowledgeBase) {
    setDeleting(null);
    setActionError(null);
    try {
      await deleteBase(base.id);
      dropUploads(base.id);
      setBases((old) => old.filter((b) => b.id !== base.id));
    } catch (caught) {
      setActionError(caught);
    }
  }

  return (
    <section class="page kb-page" aria-labelledby="kb-title">
      <div class="kb-head">
        <h1 id="kb-title">{t("kb.title")}</h1>
        <button type="button" class="primary" onClick={() => setCreating(true)}>
          {t("kb.new")}
        </button>
      </div>
      <p class="hint">{t("kb.intro")}</p>
      {actionError !== null && <ErrorNote error={actionError} />}
      {error !== null ? (
        <ErrorNote error={error} onRetry={() => void load()} />
      ) : !loading && !bases.length ? (
        <p class="empty">{t("kb.empty")}</p>
      ) : (
        <table class="data kb-table kb-bases" aria-label={t("kb.list.label")}>
          <thead>
            <tr>
              <th scope="col">{t("kb.col.name")}</th>
              <th scope="col">{t("kb.col.description")}</th>
              <th scope="col" class="num">
                {t("kb.col.documents")}
              </th>
              <th scope="col">{t("kb.col.status")}</th>
              <th scope="col">
                <span class="visually-hidden">{t("kb.col.actions")}</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {bases.map((base) => (
              <tr key={base.id}>
                <td class="kb-name" data-label={t("kb.col.name")}>
                  <a
                    href={`/kb/${encodeURIComponent(base.id)}`}
                    onClick={(e) => onLinkClick(e, { name: "kb", id: base.id })}
                  >
                    {base.name}
                  </a>
                </td>
                <td class="kb-description" data-label={t("kb.col.description")}>
                  {base.description}
                </td>
                <td class="num" data-label={t("kb.col.documents")}>
                  {formatNumber(base.documents)}
                </td>
                <td data-label={t("kb.col.status")}>{baseStatusText(counts[base.id])}</td>
                <td class="kb-actions-cell">
                  <div class="kb-actions">
                    <button
                      type="button"
                      aria-label={t("kb.renameOf", { name: base.name })}
                      onClick={() => setEditing(base)}
                    >
                      {t("common.rename")}
                    </button>
                    <button
                      type="button"
                      class="danger"
                      aria-label={t("kb.deleteOf", { name: base.name })}
                      onClick={() => setDeleting(base)}
                    >
                      {t("common.delete")}
                    </button>
                  </div>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {loading && <p class="loading">{t("app.loading")}</p>}
      {hasMore && !loading && (
        <button type="button" onClick={() => void load(bases[bases.length - 1]?.id)}>
          {t("common.loadMore")}
        </button>
      )}
      {creating && (
        <BaseDialog
          onCancel={() => setCreating(false)}
          onDone={(base) => {
            setCreating(false);
            navigate({ name: "kb", id: base.id });
          }}
        />
      )}
      {editing && (
        <BaseDialog
          base={editing}
          onCancel={() => setEditing(null)}
          onDone={(saved) => {
            setEditing(null);
            setBases((old) => old.map((b) => (b.id === saved.id ? saved : b)));
          }}
        />
      )}
      {deleting && (
        <Confirm
          message={t("kb.confirmDeleteBase", { name: deleting.name })}
          onCancel={() => setDeleting(null)}
          onConfirm={() => void remove(deleting)}
        />
      )}
    </section>
  );
}
