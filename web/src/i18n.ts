// Every string the page shows goes through t(): English and Simplified Chinese, chosen
// from the browser's language (navigator.languages), or the user's choice in settings.
import { signal } from "@preact/signals";
import { en } from "./locales/en";
import { zh } from "./locales/zh";

export type Key = keyof typeof en;
export type Lang = "en" | "zh";
const tables: Record<Lang, Record<Key, string>> = { en, zh };

export function detect(languages: readonly string[] = navigator.languages ?? []): Lang {
  const saved = localStorage.getItem("parley.lang");
  if (saved === "en" || saved === "zh") return saved;
  for (const tag of languages) {
    const lower = tag.toLowerCase();
    if (lower.startsWith("zh")) return "zh";
    if (lower.startsWith("en")) return "en";
  }
  return "en";
}

export const lang = signal<Lang>(detect());

export function setLang(value: Lang): void {
  localStorage.setItem("parley.lang", value);
  lang.value = value;
  document.documentElement.lang = value === "zh" ? "zh-CN" : "en";
}

/** The string for `key` in the current language, `{name}` placeholders filled. */
export function t(key: Key, vars?: Record<string, string | number>): string {
  const text = tables[lang.value][key] ?? en[key] ?? key;
  if (!vars) return text;
  return text.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in vars ? String(vars[name]) : whole,
  );
}
