// The sources of a reply: the knowledge passages it was given, numbered as the model saw
// them, so that the citation markers in its text ([1] -> #{prefix}-1) land on them. Each
// shows the file, page, section and score, the exact passage sent to the model, and a
// link that opens the document. All of it is text (a file may be named anything).
import { t } from "../i18n";
import type { Citation } from "../types";
import "./message.css";

export interface SourcesProps {
  citations: Citation[];
  /** Items get the ids `{prefix}-{rank}`: pass the citePrefix given to <Markdown>. */
  prefix: string;
}

/** The id of a source's list item (the same rule as markdown.ts for the marker's href). */
export function sourceId(prefix: string, rank: number): string {
  return `${prefix.replace(/[^\w-]/g, "_")}-${rank}`;
}

/** Where a source's document can be opened, when both ids are known. */
export function documentUrl(citation: Citation): string | null {
  if (!citation.knowledge_base_id || !citation.document_id) return null;
  const kb = encodeURIComponent(citation.knowledge_base_id);
  const doc = encodeURIComponent(citation.document_id);
  return `/v1/knowledge_bases/${kb}/documents/${doc}/content`;
}

/** 0.01642 -> "0.0164", 0.8312 -> "0.831". */
export function formatScore(score: number): string {
  return String(Number(score.toPrecision(3)));
}

function Source({ citation, prefix }: { citation: Citation; prefix: string }) {
  const title = citation.title?.trim() || t("msg.sources.untitled");
  const url = documentUrl(citation);
  const details = [
    citation.page != null ? t("msg.sources.page", { page: citation.page }) : null,
    citation.section?.trim() || null,
    citation.score != null ? t("msg.sources.score", { score: formatScore(citation.score) }) : null,
  ].filter((part): part is string => part !== null);
  return (
    <li id={sourceId(prefix, citation.rank)} class="source" tabIndex={-1}>
      <span class="source-rank">
        {citation.rank}
      </span>
      <div class="source-body">
        <div class="source-head">
          <span class="source-title">{title}</span>
          {url && (
            <a
              class="source-open"
              href={url}
              target="_blank"
              rel="noopener noreferrer"
              aria-label={t("msg.sources.openLabel", { title })}
            >
              {t("msg.sources.open")}
            </a>
          )}
        </div>
        {details.length > 0 && <div class="source-meta">{details.join(" · ")}</div>}
        {citation.excerpt && (
          <details class="source-passage">
            <summary>{t("msg.sources.passage")}</summary>
            <blockquote class="source-excerpt">{citation.excerpt}</blockquote>
          </details>
        )}
      </div>
    </li>
  );
}

export function Sources({ citations, prefix }: SourcesProps) {
  if (!citations.length) return null;
  const ordered = [...citations].sort((a, b) => a.rank - b.rank);
  const headingId = `${sourceId(prefix, 0)}-heading`;
  return (
    <section class="sources" aria-labelledby={headingId}>
      <h3 class="sources-title" id={headingId}>
        {t("msg.sources")}
      </h3>
      <ol class="sources-list">
        {ordered.map((citation) => (
          <Source key={citation.rank} citation={citation} prefix={prefix} />
        ))}
      </ol>
    </section>
  );
}
