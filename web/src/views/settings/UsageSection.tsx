// Settings > Usage: the caller's key's tokens and cost today and this month (UTC), with
// the limits the operator set.
import { api } from "../../api";
import { ErrorNote } from "../../components/ErrorNote";
import { lang, t } from "../../i18n";
import { useLoad } from "./data";
import type { UsagePeriod, UsageReport } from "./types";

function locale(): string {
  return lang.value === "zh" ? "zh-CN" : "en";
}

export function formatTokens(value: number): string {
  return new Intl.NumberFormat(locale()).format(value);
}

/** Dollars: cents for a dollar and up, more digits for small amounts. */
export function formatCost(value: number): string {
  const digits = value === 0 ? 2 : value < 0.01 ? 4 : value < 1 ? 3 : 2;
  return new Intl.NumberFormat(locale(), {
    style: "currency",
    currency: "USD",
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  }).format(value);
}

/** "used of limit (n%)", or just "used" without a limit. */
export function amount(used: string, limit: string | null, ratio: number | null): string {
  if (limit === null) return used;
  return t("usage.ofLimit", { used, limit, percent: Math.round((ratio ?? 0) * 100) });
}

function Row({
  label,
  used,
  limit,
  format,
}: {
  label: string;
  used: number;
  limit: number | null;
  format: (value: number) => string;
}) {
  const ratio = limit === null ? null : limit > 0 ? Math.min(used / limit, 1) : 1;
  const tone = ratio === null ? "" : ratio >= 1 ? "bad" : ratio >= 0.8 ? "warn" : "ok";
  return (
    <div class="usage-row">
      <span class="usage-label">{label}</span>
      <span class="usage-value">{amount(format(used), limit === null ? null : format(limit), ratio)}</span>
      {limit !== null && limit > 0 && (
        <meter class={`usage-meter ${tone}`} min={0} max={limit} low={limit * 0.8} high={limit * 0.99} optimum={0} value={used} aria-label={label}>
          {Math.round((ratio ?? 0) * 100)}%
        </meter>
      )}
    </div>
  );
}

function Period({ title, period }: { title: string; period: UsagePeriod }) {
  const resets = new Date(period.resets_at).toLocaleString(locale(), { dateStyle: "medium", timeStyle: "short" });
  return (
    <div class="usage-period" role="group" aria-label={title}>
      <h3>{title}</h3>
      <Row label={t("usage.tokens")} used={period.tokens} limit={period.limit_tokens} format={formatTokens} />
      <Row label={t("usage.cost")} used={period.cost_usd} limit={period.limit_cost_usd} format={formatCost} />
      <div class="usage-row">
        <span class="usage-label">{t("usage.calls")}</span>
        <span class="usage-value">{formatTokens(period.calls)}</span>
      </div>
      <p class="hint">{t("usage.resets", { when: resets })}</p>
    </div>
  );
}

export function UsageSection() {
  const usage = useLoad(() => api<UsageReport>("/v1/usage"));
  const report = usage.data;
  return (
    <section class="settings-section" aria-labelledby="usage-heading">
      <div class="settings-head">
        <h2 id="usage-heading">{t("usage.title")}</h2>
        <button type="button" onClick={usage.reload} disabled={usage.loading}>
          {t("usage.refresh")}
        </button>
      </div>
      {usage.error !== null && <ErrorNote error={usage.error} onRetry={usage.reload} />}
      {usage.loading && !report && <p class="loading">{t("app.loading")}</p>}
      {report && (
        <>
          <p class="hint">
            {t("usage.forKey", { name: report.key_name ?? t("settings.local") })}{" "}
            {report.limits_enabled ? t("usage.limitsOn") : t("usage.limitsOff")}
          </p>
          <div class="usage-grid">
            <Period title={t("usage.today")} period={report.day} />
            <Period title={t("usage.month")} period={report.month} />
          </div>
        </>
      )}
    </section>
  );
}
