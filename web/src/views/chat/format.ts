// Numbers as the chat shows them: costs in USD, token counts. The formatters are made
// once per language (making one is slow; a long conversation formats hundreds).
import { lang } from "../../i18n";

const formats = new Map<string, Intl.NumberFormat>();

function format(key: string, options: Intl.NumberFormatOptions): Intl.NumberFormat {
  const id = `${lang.value}:${key}`;
  let made = formats.get(id);
  if (!made) {
    made = new Intl.NumberFormat(lang.value === "zh" ? "zh-CN" : "en", options);
    formats.set(id, made);
  }
  return made;
}

/** "$0.0123"; under a hundredth of a cent "<$0.0001"; nothing spent "$0". */
export function usd(value: number): string {
  if (value === 0) return "$0";
  if (value < 0.0001) return "<$0.0001";
  const small = value < 1;
  const digits = format(small ? "usd4" : "usd2", { minimumFractionDigits: 2, maximumFractionDigits: small ? 4 : 2 });
  return `$${digits.format(value)}`;
}

/** A cost, or its lower bound when a model without a price was used: "≥ $0.000042". */
export function spend(value: number, complete: boolean): string {
  if (complete) return usd(value);
  if (value > 0 && value < 0.0001) {
    return `≥ $${format("sig2", { maximumSignificantDigits: 2, maximumFractionDigits: 8 }).format(value)}`;
  }
  return `≥ ${usd(value)}`;
}

export function count(value: number): string {
  return format("count", {}).format(value);
}
