import "../markdown.testenv"; // first: makes happy-dom behave like a browser for DOMPurify
import { act, cleanup, render } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, test, vi } from "vitest";
import { formatSeconds, Reasoning } from "./Reasoning";

let frames: FrameRequestCallback[] = [];
beforeEach(() => {
  frames = [];
  vi.stubGlobal("requestAnimationFrame", (callback: FrameRequestCallback) => frames.push(callback));
  vi.stubGlobal("cancelAnimationFrame", () => {});
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});
function flushFrames(): void {
  const due = frames;
  frames = [];
  act(() => due.forEach((callback) => callback(0)));
}

describe("Reasoning", () => {
  test("is open and streams while the model reasons, then collapses with its duration", () => {
    const { container, rerender } = render(<Reasoning text="Let me **think**" streaming />);
    const details = container.querySelector("details")!;
    expect(details.open).toBe(true);
    expect(container.querySelector("summary")?.textContent).toBe("Reasoning…");
    flushFrames();
    expect(details.querySelector("strong")?.textContent).toBe("think");

    rerender(<Reasoning text="Let me **think** harder" streaming={false} seconds={12.4} />);
    expect(details.open).toBe(false);
    expect(container.querySelector("summary")?.textContent).toBe("Reasoned for 12 s");
  });

  test("a stored reply's reasoning starts closed and opens on request", () => {
    const { container } = render(<Reasoning text="Because <script>alert(1)</script> reasons." />);
    const details = container.querySelector("details")!;
    expect(details.open).toBe(false);
    expect(container.querySelector("summary")?.textContent).toBe("Reasoning");
    expect(container.querySelector(".md")).toBeNull(); // not rendered while hidden
    act(() => {
      details.open = true;
      details.dispatchEvent(new Event("toggle"));
    });
    expect(container.querySelector(".md")?.textContent).toContain("Because");
    expect(container.querySelector("script")).toBeNull();
  });

  test("seconds are shown briefly", () => {
    expect(formatSeconds(0.44)).toBe("0.4");
    expect(formatSeconds(9.96)).toBe("10");
    expect(formatSeconds(73.2)).toBe("73");
  });
});
