// A base's documents: name, size, status, indexing progress (a <progress> per file and
// one for the base), the reason of those that failed, and per-file actions. Every name
// and reason is text (Preact escapes it): a file named like markup shows literally.
import { t } from "../../i18n";
import { formatNumber, formatSize } from "./format";
import { contentUrl, type KbDocument } from "./kbApi";
import { baseProgress, canCancel, canReindex, documentProgress, type BaseProgress } from "./progress";
import type { DocumentsState } from "./documents";

export function BaseProgressBar({ progress }: { progress: BaseProgress }) {
  const finished = progress.ready + progress.failed + progress.cancelled;
  const parts = [
    t("kb.progress.summary", { finished: formatNumber(finished), total: formatNumber(progress.total) }),
  ];
  if (progress.indexing) parts.push(t("kb.progress.indexing", { count: formatNumber(progress.indexing) }));
  if (progress.queued) parts.push(t("kb.progress.waiting", { count: formatNumber(progress.queued) }));
  if (progress.failed) parts.push(t("kb.progress.failed", { count: formatNumber(progress.failed) }));
  if (progress.cancelled) parts.push(t("kb.progress.cancelled", { count: formatNumber(progress.cancelled) }));
  if (progress.chunksTotal) {
    parts.push(
      t("kb.progress.chunks", {
        done: formatNumber(progress.chunksDone),
        total: formatNumber(progress.chunksTotal),
      }),
    );
  }
  return (
    <div class="kb-base-progress">
      <progress
        max={Math.max(progress.total, 1)}
        value={progress.total ? progress.value : 0}
        aria-label={t("kb.progress.base")}
        aria-describedby="kb-base-progress-text"
      />
      <p id="kb-base-progress-text" class="hint">
        {parts.join(" · ")}
      </p>
    </div>
  );
}

function progressText(doc: KbDocument): string {
  if (doc.status === "queued") return t("kb.progress.queued");
  if (doc.status === "indexing" && !doc.chunks_total) return t("kb.progress.reading");
  if (doc.chunks_total) {
    return t("kb.progress.chunks", {
      done: formatNumber(Math.min(doc.chunks_done, doc.chunks_total)),
      total: formatNumber(doc.chunks_total),
    });
  }
  return "";
}

interface RowActions {
  onCancel: (doc: KbDocument) => void;
  onReindex: (doc: KbDocument) => void;
  onDelete: (doc: KbDocument) => void;
}

function DocumentRow({ doc, kb, actions }: { doc: KbDocument; kb: string; actions: RowActions }) {
  const progress = documentProgress(doc);
  const name = doc.filename;
  return (
    <tr class={`kb-doc ${doc.status}`}>
      <td class="kb-file" data-label={t("kb.col.file")}>
        <span class="kb-file-name">{name}</span>
        {doc.title && doc.title !== name && <span class="hint kb-doc-title">{doc.title}</span>}
      </td>
      <td class="num" data-label={t("kb.col.size")}>
        {formatSize(doc.size)}
        {doc.pages ? <span class="hint"> · {t("kb.pages", { count: formatNumber(doc.pages) })}</span> : null}
      </td>
      <td data-label={t("kb.col.status")}>
        <span class={`kb-status ${doc.status}`}>{t(`kb.status.${doc.status}`)}</span>
      </td>
      <td class="kb-progress-cell" data-label={t("kb.col.progress")}>
        {progress && (
          <progress
            // a new element when it turns (in)determinate: a removed value is not unset
            key={progress.value === null ? "indeterminate" : "determinate"}
            max={progress.max}
            // no value: indeterminate (the document is being read, its chunks not counted yet)
            value={progress.value ?? undefined}
            aria-label={t("kb.progress.file", { name })}
          />
        )}
        {progress && <span class="hint kb-progress-text">{progressText(doc)}</span>}
        {doc.status === "failed" && doc.error && (
          <p class="kb-reason">{t("kb.doc.reason", { reason: doc.error })}</p>
        )}
      </td>
      <td class="kb-actions-cell">
        <div class="kb-actions">
          <a
            class="button"
            href={contentUrl(kb, doc.id)}
            target="_blank"
            rel="noopener noreferrer"
            aria-label={t("kb.doc.openOf", { name })}
          >
            {t("kb.doc.open")}
          </a>
          {canCancel(doc.status) && (
            <button
              type="button"
              aria-label={t("kb.doc.cancelOf", { name })}
              onClick={() => actions.onCancel(doc)}
            >
              {t("kb.doc.cancel")}
            </button>
          )}
          {canReindex(doc.status) && (
            <button
              type="button"
              aria-label={t("kb.doc.reindexOf", { name })}
              onClick={() => actions.onReindex(doc)}
            >
              {t("kb.doc.reindex")}
            </button>
          )}
          {doc.status !== "deleting" && (
            <button
              type="button"
              class="danger"
              aria-label={t("kb.doc.deleteOf", { name })}
              onClick={() => actions.onDelete(doc)}
            >
              {t("kb.doc.delete")}
            </button>
          )}
        </div>
      </td>
    </tr>
  );
}

export function DocumentsTable({
  kb,
  state,
  actions,
  onLoadMore,
}: {
  kb: string;
  state: DocumentsState;
  actions: RowActions;
  onLoadMore: () => void;
}) {
  const progress = baseProgress(state.counts, state.docs);
  if (!state.docs.length && !progress.total) {
    return <p class="empty">{t("kb.docs.empty")}</p>;
  }
  return (
    <>
      <BaseProgressBar progress={progress} />
      <table class="data kb-table kb-docs" aria-label={t("kb.docs.label")}>
        <thead>
          <tr>
            <th scope="col">{t("kb.col.file")}</th>
            <th scope="col" class="num">
              {t("kb.col.size")}
            </th>
            <th scope="col">{t("kb.col.status")}</th>
            <th scope="col">{t("kb.col.progress")}</th>
            <th scope="col">
              <span class="visually-hidden">{t("kb.col.actions")}</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {state.docs.map((doc) => (
            <DocumentRow key={doc.id} doc={doc} kb={kb} actions={actions} />
          ))}
        </tbody>
      </table>
      {state.hasMore && (
        <div class="kb-more">
          <span class="hint">
            {t("kb.docs.shown", {
              shown: formatNumber(state.docs.length),
              total: formatNumber(progress.total),
            })}
          </span>
          <button type="button" disabled={state.loadingMore} onClick={onLoadMore}>
            {t("kb.docs.more")}
          </button>
        </div>
      )}
    </>
  );
}
