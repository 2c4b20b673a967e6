// Numbers as the page shows them, in the page's language.
import { lang, t } from "../../i18n";

function locale(): string {
  return lang.value === "zh" ? "zh-CN" : "en";
}

export function formatNumber(n: number, digits = 0): string {
  return n.toLocaleString(locale(), { maximumFractionDigits: digits });
}

export function formatSize(bytes: number): string {
  if (bytes < 1024) return t("kb.size.b", { n: formatNumber(bytes) });
  if (bytes < 1024 ** 2) return t("kb.size.kb", { n: formatNumber(bytes / 1024, 1) });
  if (bytes < 1024 ** 3) return t("kb.size.mb", { n: formatNumber(bytes / 1024 ** 2, 1) });
  return t("kb.size.gb", { n: formatNumber(bytes / 1024 ** 3, 1) });
}

/** A search score: three significant digits (fused scores are small: 0.0328). */
export function formatScore(score: number): string {
  if (!Number.isFinite(score)) return String(score);
  return Number(score.toPrecision(3)).toLocaleString(locale(), { maximumSignificantDigits: 3 });
}
