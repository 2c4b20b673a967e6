import "../markdown.testenv"; // first: makes happy-dom behave like a browser for DOMPurify
import { act, cleanup, fireEvent, render } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, test, vi } from "vitest";
import { renderMarkdown } from "../markdown";
import { Markdown } from "./Markdown";

// Animation frames run when the test says so.
let frames: FrameRequestCallback[] = [];
function flushFrames(): number {
  const due = frames;
  frames = [];
  act(() => due.forEach((callback) => callback(performance.now())));
  return due.length;
}

beforeEach(() => {
  frames = [];
  vi.stubGlobal("requestAnimationFrame", (callback: FrameRequestCallback) => frames.push(callback));
  vi.stubGlobal("cancelAnimationFrame", (id: number) => {
    frames[id - 1] = () => {};
  });
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

/** A reply of about `count` tokens with every kind of block, split as a model streams. */
function reply(count: number): string[] {
  const sections = [
    "## Section {n}\n\nThis paragraph cites a source [1] and another [2], has **bold**, _emphasis_, `code` and a [link](https://example.com/{n}).\n\n",
    "- first item {n}\n- second item with [3]\n  continued lazily\n- [ ] a task\n\n",
    "```python\ndef handler_{n}(event):\n    # comment\n    return {\"ok\": True, \"n\": {n}}\n```\n\n",
    "| name | value |\n|:-----|------:|\n| alpha | {n} |\n| beta | 2 |\n\n",
    "> A quotation that goes\n> over two lines.\n\nSetext heading {n}\n---\n\n",
    "1. one\n2. two\n\n   loose paragraph in the list\n\n3. three\n\n<b>raw</b> html and <img src=x onerror=alert(1)> stripped.\n\n",
  ];
  const tokens: string[] = [];
  for (let n = 0; tokens.length < count; n++) {
    const text = sections[n % sections.length]!.replaceAll("{n}", String(n));
    tokens.push(...(text.match(/\s*\S{1,6}|\s+/g) ?? []));
  }
  return tokens.slice(0, count);
}

function host(container: Element): HTMLElement {
  return container.querySelector<HTMLElement>(".md")!;
}

describe("Markdown", () => {
  test("renders sanitised HTML in one block node per top-level block", () => {
    const { container } = render(<Markdown text={"# Hi\n\nText <img src=x onerror=alert(1)>"} />);
    const blocks = [...host(container).children];
    expect(blocks.map((b) => b.className)).toEqual(["md-block", "md-block"]);
    expect(blocks[0]!.innerHTML).toBe("<h1>Hi</h1>\n");
    expect(host(container).querySelector("[onerror]")).toBeNull();
  });

  test("2,000 tokens streamed one at a time end as the one-shot render, keeping final blocks' nodes", () => {
    const tokens = reply(2000);
    expect(tokens.length).toBe(2000);
    const cites = { citePrefix: "m1", citeCount: 2 };
    let text = "";
    const { container, rerender } = render(<Markdown text="" streaming {...cites} />);
    const md = host(container);
    const seen = new Map<number, Element>(); // block index -> node, once the block was final
    tokens.forEach((token, i) => {
      text += token;
      rerender(<Markdown text={text} streaming {...cites} />);
      expect(flushFrames()).toBe(1);
      // Every block but the last is final: its node must never be replaced afterwards.
      const nodes = [...md.children];
      nodes.slice(0, -1).forEach((node, index) => {
        const earlier = seen.get(index);
        if (earlier) expect(node, `block ${index} at token ${i}`).toBe(earlier);
        else seen.set(index, node);
      });
    });
    const streamedHtml = md.innerHTML;
    const streamedNodes = [...md.children];

    // Streaming ends: the whole text is lexed again, nothing changes.
    rerender(<Markdown text={text} streaming={false} {...cites} />);
    expect(md.innerHTML).toBe(streamedHtml);
    expect([...md.children]).toEqual(streamedNodes);
    streamedNodes.forEach((node, index) => expect(md.children[index]).toBe(node));

    // The same as a one-shot render, and as renderMarkdown's HTML.
    const { container: once } = render(<Markdown text={text} {...cites} />);
    expect(host(once).innerHTML).toBe(streamedHtml);
    const blocksHtml = [...md.children].map((node) => node.innerHTML).join("");
    expect(blocksHtml).toBe(renderMarkdown(text, { citations: { prefix: "m1", count: 2 } }));
    expect(md.querySelectorAll(".md-code").length).toBeGreaterThan(10);
    expect(md.querySelectorAll("a.cite").length).toBeGreaterThan(20);
    expect(md.querySelector("[onerror]")).toBeNull();
  }, 60_000);

  test("updates at most once per animation frame while streaming", () => {
    const { container, rerender } = render(<Markdown text="Hello" streaming />);
    expect(host(container).textContent).toBe(""); // nothing before the first frame
    rerender(<Markdown text="Hello wor" streaming />);
    rerender(<Markdown text="Hello world" streaming />);
    expect(flushFrames()).toBe(1);
    expect(host(container).textContent?.trim()).toBe("Hello world");
    expect(flushFrames()).toBe(0);
  });

  test("a streaming block is re-rendered; the block before it is not", () => {
    const { container, rerender } = render(<Markdown text={"First.\n\nSec"} streaming />);
    flushFrames();
    const [first, second] = [...host(container).children];
    rerender(<Markdown text={"First.\n\nSecond, longer"} streaming />);
    flushFrames();
    expect(host(container).children[0]).toBe(first);
    expect(host(container).children[1]).not.toBe(second);
    expect(host(container).children[1]!.textContent?.trim()).toBe("Second, longer");
  });

  test("an unclosed code fence renders as code while streaming", () => {
    const { container } = render(<Markdown text={"```ts\nconst x: number = 1;\nconst y"} streaming />);
    flushFrames();
    expect(host(container).querySelector("code.language-ts")?.textContent).toBe("const x: number = 1;\nconst y\n");
  });

  test("citations arriving later turn the markers into links", () => {
    const { container, rerender } = render(<Markdown text="Fact [1]." />);
    expect(host(container).querySelector("a.cite")).toBeNull();
    rerender(<Markdown text="Fact [1]." citePrefix="m9" citeCount={1} />);
    expect(host(container).querySelector("a.cite")?.getAttribute("href")).toBe("#m9-1");
  });

  test("the copy button copies the code and says so", async () => {
    vi.useFakeTimers();
    const writeText = vi.fn(() => Promise.resolve());
    vi.stubGlobal("navigator", { ...navigator, clipboard: { writeText } });
    const { container } = render(<Markdown text={"```bash\necho hi\n```"} />);
    const button = host(container).querySelector<HTMLButtonElement>("button.md-copy")!;
    expect(button.getAttribute("aria-label")).toBe("Copy code");
    expect(button.textContent).toBe("Copy");
    await act(async () => {
      fireEvent.click(button);
      await Promise.resolve();
    });
    expect(writeText).toHaveBeenCalledWith("echo hi\n");
    expect(button.textContent).toBe("Copied");
    vi.advanceTimersByTime(2000);
    expect(button.textContent).toBe("Copy");
    vi.useRealTimers();
  });

  test("a citation marker moves to its source without a history entry", () => {
    const source = document.createElement("li");
    source.id = "m2-1";
    source.tabIndex = -1;
    document.body.appendChild(source);
    const { container } = render(<Markdown text="Fact [1]." citePrefix="m2" citeCount={1} />);
    const link = host(container).querySelector<HTMLAnchorElement>("a.cite")!;
    const event = new MouseEvent("click", { bubbles: true, cancelable: true });
    link.dispatchEvent(event);
    expect(event.defaultPrevented).toBe(true);
    expect(document.activeElement).toBe(source);
    expect(source.classList.contains("source-flash")).toBe(true);
    source.remove();
  });
});
