// /kb/{id}: one base: its name and counts, rename / delete / re-index all, uploads
// (buttons, folder, drag and drop anywhere on the page), the documents with their
// indexing progress (polled while anything is pending), and search.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { Confirm } from "../../components/Confirm";
import { ErrorNote, errorText } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { navigate, onLinkClick } from "../../router";
import { BaseDialog } from "./BaseDialog";
import { DocumentsStore, isBusy } from "./documents";
import { DocumentsTable } from "./DocumentsTable";
import type { FileSelection } from "./files";
import { formatNumber } from "./format";
import { deleteBase, getBase, type KbDocument, type KnowledgeBase } from "./kbApi";
import { SearchBox } from "./SearchBox";
import { UploadButtons, UploadList, useDrop } from "./Uploader";
import { dropUploads, uploadsFor } from "./uploads";

type Pending =
  | { kind: "deleteBase" }
  | { kind: "reindexAll" }
  | { kind: "deleteDocument"; doc: KbDocument }
  | null;

function Base({ base, onChanged }: { base: KnowledgeBase; onChanged: (base: KnowledgeBase) => void }) {
  const documents = useMemo(() => new DocumentsStore(base.id), [base.id]);
  const uploads = useMemo(() => uploadsFor(base.id), [base.id]);
  const [editing, setEditing] = useState(false);
  const [asking, setAsking] = useState<Pending>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");

  useEffect(() => {
    void documents.load();
    uploads.onQueued = (docs) => documents.addQueued(docs);
    return () => {
      uploads.onQueued = null;
      documents.dispose();
    };
  }, [documents, uploads]);

  const upload = (selection: FileSelection) => {
    setActionError(null);
    setNotice(selection.files.length ? "" : t("kb.upload.nothing"));
    uploads.add(selection);
  };
  const drop = useDrop(upload, setActionError);

  async function act(work: () => Promise<unknown>) {
    setActionError(null);
    setNotice("");
    try {
      await work();
    } catch (caught) {
      setActionError(caught);
    }
  }

  async function confirmed() {
    const question = asking;
    setAsking(null);
    if (!question) return;
    if (question.kind === "deleteBase") {
      await act(async () => {
        await deleteBase(base.id);
        dropUploads(base.id);
        navigate({ name: "kb", id: null }, { replace: true });
      });
    } else if (question.kind === "reindexAll") {
      await act(async () => {
        const queued = await documents.reindexAll();
        setNotice(t("kb.reindexQueued", { count: formatNumber(queued) }));
      });
    } else {
      await act(() => documents.remove(question.doc.id));
    }
  }

  const state = documents.state.value;
  const busy = !state.loading && isBusy(state);
  const wasBusy = useRef(false);
  useEffect(() => {
    const ended = wasBusy.current && !busy;
    wasBusy.current = busy;
    if (!ended) return;
    // indexing ended: the base's chunk count (and embedding model) changed
    const controller = new AbortController();
    getBase(base.id, controller.signal).then(onChanged, () => undefined);
    return () => controller.abort();
  }, [busy]);
  const total = Object.values(state.counts).reduce((sum, n) => sum + (n ?? 0), 0);
  return (
    <section class="page kb-page kb-detail" aria-labelledby="kb-base-title" {...drop.handlers}>
      <a class="kb-back" href="/kb" onClick={(e) => onLinkClick(e, { name: "kb", id: null })}>
        ← {t("kb.back")}
      </a>
      <div class="kb-head">
        <h1 id="kb-base-title">{base.name}</h1>
        <div class="kb-head-actions">
          <button type="button" onClick={() => setEditing(true)}>
            {t("kb.edit")}
          </button>
          <button
            type="button"
            disabled={!total}
            onClick={() => setAsking({ kind: "reindexAll" })}
          >
            {t("kb.reindexAll")}
          </button>
          <button type="button" class="danger" onClick={() => setAsking({ kind: "deleteBase" })}>
            {t("kb.deleteBase")}
          </button>
        </div>
      </div>
      {base.description && <p class="kb-description">{base.description}</p>}
      <p class="hint">
        {t("kb.meta", {
          documents: formatNumber(state.loading ? base.documents : total),
          chunks: formatNumber(base.chunks),
        })}
        {" · "}
        {base.embedding_model
          ? t("kb.meta.embeddings", { model: base.embedding_model })
          : t("kb.meta.wordsOnly")}
      </p>
      {actionError !== null && <ErrorNote error={actionError} />}
      {notice && (
        <p class="kb-notice" role="status">
          {notice}
        </p>
      )}

      <section class="kb-section" aria-labelledby="kb-upload-title">
        <h2 id="kb-upload-title">{t("kb.upload.title")}</h2>
        <UploadButtons onFiles={upload} dragging={drop.dragging}>
          <UploadList store={uploads} />
        </UploadButtons>
      </section>

      <section class="kb-section" aria-labelledby="kb-docs-title">
        <h2 id="kb-docs-title">{t("kb.docs.title")}</h2>
        {state.pollError !== null && (
          <ErrorNote
            error={t("kb.docs.refreshFailed", {
              message: errorText(state.pollError),
            })}
            onRetry={() => void documents.refresh().then(() => documents.ensurePolling(), () => undefined)}
          />
        )}
        {state.error !== null ? (
          <ErrorNote error={state.error} onRetry={() => void documents.load()} />
        ) : state.loading ? (
          <p class="loading">{t("app.loading")}</p>
        ) : (
          <DocumentsTable
            kb={base.id}
            state={state}
            onLoadMore={() => void documents.loadMore()}
            actions={{
              onCancel: (doc) => void act(() => documents.cancel(doc.id)),
              onReindex: (doc) => void act(() => documents.reindex(doc.id)),
              onDelete: (doc) => setAsking({ kind: "deleteDocument", doc }),
            }}
          />
        )}
      </section>

      <SearchBox kb={base.id} />

      {editing && (
        <BaseDialog
          base={base}
          onCancel={() => setEditing(false)}
          onDone={(saved) => {
            setEditing(false);
            onChanged(saved);
          }}
        />
      )}
      {asking && (
        <Confirm
          message={
            asking.kind === "deleteBase"
              ? t("kb.confirmDeleteBase", { name: base.name })
              : asking.kind === "reindexAll"
                ? t("kb.confirmReindexAll", { name: base.name })
                : t("kb.doc.confirmDelete", { name: asking.doc.filename })
          }
          confirmLabel={asking.kind === "reindexAll" ? t("kb.reindexAll") : undefined}
          danger={asking.kind !== "reindexAll"}
          onCancel={() => setAsking(null)}
          onConfirm={() => void confirmed()}
        />
      )}
    </section>
  );
}

export function BaseDetail({ kbId }: { kbId: string }) {
  const [base, setBase] = useState<KnowledgeBase | null>(null);
  const [error, setError] = useState<unknown>(null);

  async function load(signal?: AbortSignal) {
    setError(null);
    try {
      const found = await getBase(kbId, signal);
      if (!signal?.aborted) setBase(found);
    } catch (caught) {
      if (!signal?.aborted) setError(caught);
    }
  }

  useEffect(() => {
    setBase(null);
    const controller = new AbortController();
    void load(controller.signal);
    return () => controller.abort();
  }, [kbId]);

  if (error !== null) {
    return (
      <section class="page kb-page">
        <a class="kb-back" href="/kb" onClick={(e) => onLinkClick(e, { name: "kb", id: null })}>
          ← {t("kb.back")}
        </a>
        <ErrorNote error={error} onRetry={() => void load()} />
      </section>
    );
  }
  if (!base) return <p class="loading">{t("app.loading")}</p>;
  return <Base base={base} onChanged={setBase} />;
}
