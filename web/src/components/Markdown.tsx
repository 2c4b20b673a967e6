// A Markdown text (a reply, reasoning) as sanitised HTML, rendered incrementally: the
// text is split into top-level blocks (markdown.ts MarkdownStream); each block is one
// <div class="md-block"> whose HTML is built once, and only blocks whose key changed are
// rebuilt. While a reply streams, the DOM is brought up to date at most once per
// animation frame, and then only the last, still open block is rebuilt; the blocks before
// it keep their DOM nodes. When streaming stops the whole text is lexed once more (the
// blocks that did not change keep their nodes).
//
// The code blocks' copy buttons and the citation markers work by event delegation on the
// wrapper: the sanitised HTML carries no handlers.
import { useEffect, useLayoutEffect, useRef } from "preact/hooks";
import { lang, t } from "../i18n";
import { copyText } from "../clipboard";
import { type Block, MarkdownStream, type RenderOptions, renderBlock } from "../markdown";
import "./message.css";

export interface MarkdownProps {
  text: string;
  /** The text still grows: update at most once per frame. */
  streaming?: boolean;
  /** With citeCount: markers [1]..[citeCount] link to `#{citePrefix}-{n}` (Sources). */
  citePrefix?: string;
  citeCount?: number;
  class?: string;
}

interface Mounted {
  key: string;
  node: HTMLElement;
}

/** Keeps `host`'s children equal to the blocks of a text. */
export class BlockView {
  private stream = new MarkdownStream();
  private settings: string | null = null;
  private mounted: Mounted[] = [];
  private frame = 0;
  private text = "";

  constructor(private readonly host: HTMLElement) {}

  /** Show `text`: now, or at the next animation frame while streaming. `settings`
   *  names everything besides the text that the HTML depends on. */
  set(text: string, streaming: boolean, options: RenderOptions, settings: string): void {
    if (settings !== this.settings) {
      this.settings = settings;
      this.stream = new MarkdownStream(options);
      for (const block of this.mounted) block.key = ""; // rebuild each block once
    }
    this.text = text;
    if (!streaming) {
      this.cancel();
      this.sync(this.stream.update(text, true));
    } else if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.sync(this.stream.update(this.text));
      });
    }
  }

  dispose(): void {
    this.cancel();
  }

  private cancel(): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
  }

  /** Rebuild the blocks whose key changed, in place; drop the ones past the end. */
  private sync(blocks: Block[]): void {
    blocks.forEach((block, index) => {
      const current = this.mounted[index];
      if (current?.key === block.key) return;
      const node = document.createElement("div");
      node.className = "md-block";
      node.innerHTML = renderBlock(block); // sanitised by markdown.ts
      if (current) this.host.replaceChild(node, current.node);
      else this.host.appendChild(node);
      this.mounted[index] = { key: block.key, node };
    });
    for (const extra of this.mounted.splice(blocks.length)) extra.node.remove();
  }
}

export function Markdown({ text, streaming = false, citePrefix, citeCount = 0, class: extra }: MarkdownProps) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<BlockView | null>(null);
  const language = lang.value; // a new language rebuilds the code blocks' labels
  useLayoutEffect(() => {
    view.current ??= new BlockView(host.current!);
    const options: RenderOptions =
      citePrefix && citeCount > 0 ? { citations: { prefix: citePrefix, count: citeCount } } : {};
    view.current.set(text, streaming, options, `${language}|${citePrefix ?? ""}|${citeCount}`);
  }, [text, streaming, citePrefix, citeCount, language]);
  useEffect(() => () => view.current?.dispose(), []);
  return <div ref={host} class={extra ? `md ${extra}` : "md"} onClick={onMarkdownClick} />;
}

/** Clicks inside rendered Markdown: a code block's copy button, a citation marker. */
function onMarkdownClick(event: MouseEvent): void {
  const target = event.target instanceof Element ? event.target : null;
  const copy = target?.closest<HTMLButtonElement>("button.md-copy");
  if (copy) {
    void copyCode(copy);
    return;
  }
  const cite = target?.closest<HTMLAnchorElement>("a.cite");
  if (cite) jumpToSource(event, cite);
}

const COPIED_MS = 1500;

/** Copy the code of the block `button` belongs to; the button says whether it worked. */
export async function copyCode(button: HTMLButtonElement): Promise<boolean> {
  const code = button.closest(".md-code")?.querySelector("pre code")?.textContent ?? "";
  const copied = await copyText(code);
  button.textContent = t(copied ? "msg.code.copied" : "msg.code.copyFailed");
  button.classList.add("md-copy-done");
  setTimeout(() => {
    button.textContent = t("msg.code.copy");
    button.classList.remove("md-copy-done");
  }, COPIED_MS);
  return copied;
}

const FLASH_MS = 1600;

/** Move to the cited source in place (no history entry) and show which one it is. */
function jumpToSource(event: MouseEvent, link: HTMLAnchorElement): void {
  const id = decodeURIComponent((link.getAttribute("href") ?? "").slice(1));
  const source = id ? document.getElementById(id) : null;
  if (!source) return;
  event.preventDefault();
  source.scrollIntoView?.({ block: "nearest", behavior: "smooth" });
  source.focus({ preventScroll: true });
  source.classList.add("source-flash");
  setTimeout(() => source.classList.remove("source-flash"), FLASH_MS);
}
