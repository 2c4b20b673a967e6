// "Search this knowledge base": the base's hybrid search (words and vectors fused), each
// result with its rank, score, title, page, section and passage, all shown as text.
import { useEffect, useRef, useState } from "preact/hooks";
import { ErrorNote } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { formatNumber, formatScore } from "./format";
import { contentUrl, search, type SearchHit } from "./kbApi";

export function SearchBox({ kb }: { kb: string }) {
  const [query, setQuery] = useState("");
  const [results, setResults] = useState<SearchHit[] | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const controller = useRef<AbortController | null>(null);

  useEffect(() => () => controller.current?.abort(), []);

  async function submit(event: Event) {
    event.preventDefault();
    const text = query.trim();
    if (!text) return;
    controller.current?.abort();
    const mine = new AbortController();
    controller.current = mine;
    setBusy(true);
    setError(null);
    try {
      const page = await search(kb, text, 10, mine.signal);
      if (!mine.signal.aborted) setResults(page.data);
    } catch (caught) {
      if (!mine.signal.aborted) {
        setError(caught);
        setResults(null);
      }
    } finally {
      if (!mine.signal.aborted) setBusy(false);
    }
  }

  return (
    <section class="kb-section kb-search" aria-labelledby="kb-search-title">
      <h2 id="kb-search-title">{t("kb.search.title")}</h2>
      <form role="search" class="kb-search-form" onSubmit={submit}>
        <input
          type="search"
          aria-label={t("kb.search.label")}
          placeholder={t("kb.search.label")}
          maxLength={4000}
          value={query}
          onInput={(e) => setQuery(e.currentTarget.value)}
        />
        <button type="submit" class="primary" disabled={busy || !query.trim()}>
          {t("kb.search.submit")}
        </button>
      </form>
      <p class="hint">{t("kb.search.hint")}</p>
      {error !== null && <ErrorNote error={error} />}
      <p class="visually-hidden" role="status">
        {busy
          ? t("kb.search.searching")
          : results
            ? results.length
              ? t("kb.search.count", { count: formatNumber(results.length) })
              : t("kb.search.none")
            : ""}
      </p>
      {busy && <p class="hint">{t("kb.search.searching")}</p>}
      {!busy && results && !results.length && <p class="empty">{t("kb.search.none")}</p>}
      {results && results.length > 0 && (
        <ol class="kb-results" aria-label={t("kb.search.results")}>
          {results.map((hit) => (
            <li key={hit.chunk_id} class="kb-result">
              <div class="kb-result-head">
                <span class="kb-rank">{t("kb.search.rank", { rank: hit.rank })}</span>
                <span class="kb-score">{t("kb.search.score", { score: formatScore(hit.score) })}</span>
                <a
                  class="kb-result-title"
                  href={contentUrl(hit.knowledge_base_id, hit.document_id)}
                  target="_blank"
                  rel="noopener noreferrer"
                >
                  {hit.title || hit.filename}
                </a>
                {hit.title && hit.title !== hit.filename && <span class="hint">{hit.filename}</span>}
                {hit.page != null && <span class="hint">{t("kb.search.page", { page: hit.page })}</span>}
                {hit.section && (
                  <span class="hint kb-section-path">{t("kb.search.section", { section: hit.section })}</span>
                )}
              </div>
              <p class="kb-passage">{hit.text}</p>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}
