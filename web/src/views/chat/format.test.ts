import { afterEach, describe, expect, it } from "vitest";
import { setLang } from "../../i18n";
import { count, spend, usd } from "./format";

afterEach(() => setLang("en"));

describe("numbers", () => {
  it("costs in USD with enough digits to see small ones", () => {
    setLang("en");
    expect(usd(0)).toBe("$0");
    expect(usd(0.00001)).toBe("<$0.0001");
    expect(usd(0.0123)).toBe("$0.0123");
    expect(usd(0.5)).toBe("$0.50");
    expect(usd(12.345)).toBe("$12.35");
  });

  it("a lower bound says so, however small", () => {
    setLang("en");
    expect(spend(0.25, true)).toBe("$0.25");
    expect(spend(0.25, false)).toBe("≥ $0.25");
    expect(spend(0.0000423, false)).toBe("≥ $0.000042");
  });

  it("token counts grouped", () => {
    setLang("en");
    expect(count(12345)).toBe("12,345");
  });
});
