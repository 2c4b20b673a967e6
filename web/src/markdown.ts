// Markdown as the page shows it: marked (GFM: tables, fenced code, autolinks) parses,
// DOMPurify sanitises the HTML AFTER parsing, highlight.js (core plus a few languages)
// colours code blocks. Every model, tool or document text that is shown as rich text
// goes through renderMarkdown or MarkdownStream here; everything else is plain text.
//
// A text is rendered one top-level block at a time (a paragraph, a list, a code block,
// a table...), each sanitised on its own, so that a streaming reply re-renders only its
// last block (components/Markdown.tsx) and the result is the same as a one-shot render.
//
// What the sanitiser lets through: a fixed set of formatting tags; links to http(s),
// mailto and relative URLs only (never javascript: or data:), every link with
// rel="noopener noreferrer" and, unless it points inside the page (#...), target=_blank;
// images only from this server's /v1/files/ or as data:image/png|jpeg|gif|webp; no style,
// id, name or on* attributes, no forms, frames, SVG or MathML; class names only from the
// highlighter's and this module's vocabulary. Raw HTML with a <style> or <link> tag or a
// style attribute does not even reach the parser: it is shown as text (renderHtml). The
// copy button of a code block is the one interactive element, and only the renderer can
// make it (a random nonce proves it).
import createDOMPurify, { type Config, type UponSanitizeAttributeHookEvent } from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import go from "highlight.js/lib/languages/go";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdown from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import sql from "highlight.js/lib/languages/sql";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";
import { Lexer, Marked, type Token, type Tokens, type TokensList } from "marked";
import { t } from "./i18n";

export interface CitationOptions {
  /** Source list item ids are `{prefix}-{n}` (components/Sources.tsx). */
  prefix: string;
  /** Markers [1]..[count] become links; any other number stays text. */
  count: number;
}

export interface RenderOptions {
  citations?: CitationOptions;
}

/** One top-level block: its key changes whenever its rendered HTML could. */
export interface Block {
  key: string;
  token: Token;
  /** A long code block still being written: shown without colours until it is done
   *  (highlighting it anew each frame would cost more than a frame). */
  plain?: boolean;
}

/** An open code block longer than this is not highlighted until it is final. */
export const HIGHLIGHT_OPEN_MAX = 4000;

// ---------------------------------------------------------------- highlighting

const LANGUAGES = {
  bash, c, cpp, css, diff, go, java, javascript, json, markdown, python, rust, sql,
  typescript, xml, yaml,
};
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);
hljs.registerAliases(["shell", "sh", "zsh", "console", "shellsession"], { languageName: "bash" });

/** The language named after a fence (```py title="x" -> "py"), in lower case. */
function fenceLanguage(info: string | undefined): string {
  const word = (info ?? "").trim().split(/\s+/)[0] ?? "";
  return /^[\w+#.-]{1,32}$/.test(word) ? word.toLowerCase() : "";
}

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

// ---------------------------------------------------------------- renderer

/** Proves an element came from this module's renderer, not from the model's raw HTML. */
const NONCE = Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) =>
  b.toString(16).padStart(2, "0"),
).join("");
const TRUSTED_ATTR = "data-parley";

function copyButton(): string {
  return (
    `<button type="button" class="md-copy" ${TRUSTED_ATTR}="${NONCE}"` +
    ` aria-label="${escapeHtml(t("msg.code.copyLabel"))}">${escapeHtml(t("msg.code.copy"))}</button>`
  );
}

/** False while a block marked `plain` is rendered. */
let highlighting = true;

function renderCode({ text, lang }: Tokens.Code): string {
  const tag = fenceLanguage(lang);
  const registered = tag !== "" && hljs.getLanguage(tag) !== undefined;
  const known = highlighting && registered;
  const code = text.replace(/\n$/, "");
  const body = known
    ? hljs.highlight(code, { language: tag, ignoreIllegals: true }).value
    : escapeHtml(code);
  const label = escapeHtml(tag || t("msg.code.plain"));
  const langClass = registered ? ` language-${tag}` : "";
  return (
    `<div class="md-code"><div class="md-code-head"><span class="md-code-lang">${label}</span>` +
    `${copyButton()}</div><pre><code class="hljs${langClass}">${body}\n</code></pre></div>\n`
  );
}

const DATA_IMAGE = /^data:image\/(?:png|jpeg|gif|webp);base64,[a-z0-9+/]+=*$/i;

/** Images load only from this server's files or inline raster data: nothing that
 *  tells a third party who read the reply. */
export function isAllowedImage(src: string | null | undefined): boolean {
  if (!src) return false;
  if (DATA_IMAGE.test(src)) return true;
  try {
    const url = new URL(src, location.href);
    return url.origin === location.origin && url.pathname.startsWith("/v1/files/");
  } catch {
    return false;
  }
}

/** An image from elsewhere becomes a link to it (a click is the reader's choice). */
function renderImage({ href, title, text }: Tokens.Image): string {
  const alt = escapeHtml(text ?? "");
  const titled = title ? ` title="${escapeHtml(title)}"` : "";
  if (isAllowedImage(href)) return `<img src="${escapeHtml(href)}" alt="${alt}"${titled}>`;
  if (/^https?:\/\//i.test(href)) return `<a href="${escapeHtml(href)}"${titled}>${alt || escapeHtml(href)}</a>`;
  return alt;
}

/** Raw HTML that brings styles: a <style> or <link> tag, a style attribute. */
const STYLING = /<\/?(?:style|link)(?![\w-])|[\s"'/]style\s*=/i;

/** Raw HTML from the text passes to the sanitiser, except HTML that brings styles: it
 *  is shown as text. The sanitiser would drop it, but the browser's parser checks it
 *  against the page's CSP first (style-src 'self', which a parsed document inherits)
 *  and logs a violation for every inline style, even one never applied. */
function renderHtml({ text }: Tokens.HTML | Tokens.Tag): string {
  return STYLING.test(text) ? escapeHtml(text) : text;
}

// ---------------------------------------------------------------- citations

interface CitationToken {
  type: "citation";
  raw: string;
  numbers: number[];
  prefix: string;
}

/** The citation settings of the lex in progress (lexing is synchronous). */
let citing: CitationOptions | null = null;

// [1], [^1], [1, 2] — but not a link's text ([1](url)).
const CITATION = /^\[(\^?\d{1,4}(?:\s*,\s*\^?\d{1,4})*)\](?!\()/;

const citationExtension = {
  name: "citation",
  level: "inline" as const,
  start(src: string): number | undefined {
    if (!citing) return undefined;
    const at = src.search(/\[\^?\d/);
    return at < 0 ? undefined : at;
  },
  tokenizer(this: { lexer: Lexer }, src: string): CitationToken | undefined {
    if (!citing || this.lexer.state.inLink) return undefined;
    const match = CITATION.exec(src);
    if (!match) return undefined;
    const numbers = match[1]!.split(",").map((part) => Number(part.trim().replace(/^\^/, "")));
    if (numbers.some((n) => n < 1 || n > citing!.count)) return undefined;
    // A reference definition of the same label ([1]: https://...) makes it a link.
    if (numbers.length === 1 && this.lexer.tokens.links[match[1]!.toLowerCase()]) return undefined;
    return { type: "citation", raw: match[0], numbers, prefix: citing.prefix };
  },
  renderer(token: Tokens.Generic): string {
    const { numbers, prefix } = token as unknown as CitationToken;
    return numbers
      .map(
        (n) =>
          `<a href="#${prefix}-${n}" class="cite" aria-label="${escapeHtml(t("msg.cite", { n }))}">${n}</a>`,
      )
      .join("");
  },
};

const marked = new Marked({ gfm: true, breaks: false, async: false });
marked.use({
  extensions: [citationExtension],
  renderer: { code: renderCode, image: renderImage, html: renderHtml },
});

// ---------------------------------------------------------------- sanitiser

const ALLOWED_TAGS = [
  "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div",
  "dl", "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
  "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub",
  "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
];
const ALLOWED_ATTR = [
  "align", "alt", "aria-hidden", "aria-label", "checked", "class", "colspan", "disabled",
  "href", "lang", "open", "reversed", "rowspan", "src", "start", "title", "type", "value",
];
// http(s), mailto, or no scheme at all (relative, #fragment); DOMPurify's own pattern
// without tel:, sms: and the rest.
const SAFE_URL = /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i;
// The highlighter's classes (hljs-title function_), language-x, and this module's.
const SAFE_CLASS = /^(?:hljs(?:-[\w-]+)?|[a-z]+_{1,2}|language-[\w+#.-]+|md-[\w-]+|cite)$/;

const CONFIG: Config = {
  ALLOWED_TAGS,
  ALLOWED_ATTR,
  ALLOWED_URI_REGEXP: SAFE_URL,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  ALLOW_UNKNOWN_PROTOCOLS: false,
  RETURN_TRUSTED_TYPE: false,
};

const purify = createDOMPurify(window);

// A <button> survives only if the renderer made it (the nonce attribute itself is
// then dropped, as data-* attributes are not allowed); an <input> only as a task list's
// checkbox (made inert below).
purify.addHook("uponSanitizeElement", (node, data) => {
  const element = node as Element;
  if (data.tagName === "button") {
    data.allowedTags.button = element.getAttribute?.(TRUSTED_ATTR) === NONCE;
  } else if (data.tagName === "input") {
    data.allowedTags.input = element.getAttribute?.("type")?.toLowerCase() === "checkbox";
  }
});

purify.addHook("uponSanitizeAttribute", (_node, data: UponSanitizeAttributeHookEvent) => {
  if (data.attrName !== "class") return;
  const kept = data.attrValue.split(/\s+/).filter((name) => SAFE_CLASS.test(name));
  if (kept.length) data.attrValue = kept.join(" ");
  else data.keepAttr = false;
});

purify.addHook("afterSanitizeAttributes", (node) => {
  const element = node as Element;
  switch (element.nodeName) {
    case "A":
      secureLink(element);
      break;
    case "IMG":
      if (!isAllowedImage(element.getAttribute("src"))) element.removeAttribute("src");
      element.setAttribute("loading", "lazy");
      break;
    case "INPUT": // a task list's box, never a field
      element.setAttribute("type", "checkbox");
      element.setAttribute("disabled", "");
      break;
    case "BUTTON":
      element.setAttribute("type", "button");
      break;
  }
});

function secureLink(link: Element): void {
  link.setAttribute("rel", "noopener noreferrer");
  const href = link.getAttribute("href");
  // A citation marker moves within the page; every other link opens a new tab.
  if (href !== null && href.startsWith("#")) link.removeAttribute("target");
  else link.setAttribute("target", "_blank");
}

/** Whether DOMPurify really sanitises in this DOM (checked once, on first use): if
 *  not, nothing is trusted to it and every text is shown escaped instead. */
let sanitizerWorks: boolean | null = null;

function checkSanitizer(): boolean {
  if (!purify.isSupported) return false;
  const probe = '<p title="t">x<img src="x" onerror="1"><a href="javascript:1">y</a></p>';
  const out = purify.sanitize(probe, CONFIG) as unknown as string;
  return out.startsWith('<p title="t">x<img') && !/onerror|javascript:/i.test(out);
}

/** Sanitised HTML; where the browser cannot sanitise, the HTML as escaped text. */
export function sanitize(html: string): string {
  sanitizerWorks ??= checkSanitizer();
  if (!sanitizerWorks) return escapeHtml(html);
  return purify.sanitize(html, CONFIG) as unknown as string;
}

// ---------------------------------------------------------------- blocks

type Links = TokensList["links"];

function normalize(text: string): string {
  return text.includes("\r") ? text.replace(/\r\n?/g, "\n") : text;
}

/** Tokens of `src`, knowing the link definitions `links` made earlier in the text. */
function lexWith(src: string, links: Links, citations: CitationOptions | undefined): TokensList {
  const lexer = new Lexer(marked.defaults);
  Object.assign(lexer.tokens.links, links);
  citing = citations && citations.count > 0 ? citations : null;
  try {
    return lexer.lex(src);
  } finally {
    citing = null;
  }
}

function linksSignature(links: Links): string {
  return Object.keys(links).length ? JSON.stringify(links) : "";
}

/** Blank lines and link definitions render nothing: they are not blocks. */
function toBlocks(tokens: Token[], signature: string): Block[] {
  return tokens
    .filter((token) => token.type !== "space" && token.type !== "def")
    .map((token) => ({
      // Only a block with a bracket can use a link definition; its HTML then depends
      // on them too.
      key: signature && token.raw.includes("[") ? `${token.raw}\u0000${signature}` : token.raw,
      token,
    }));
}

/** The sanitised HTML of one block. */
export function renderBlock(block: Block): string {
  highlighting = !block.plain;
  try {
    return sanitize(marked.parser([block.token]));
  } finally {
    highlighting = true;
  }
}

/**
 * A text that grows (a streaming reply) lexed a block at a time. A block is final once
 * another block follows it: it is kept (same object, same key) and the text before the
 * last block is never lexed again; only that open last block is. `update(text, true)`
 * lexes the whole text afresh (a reply that ended), with the same keys for the blocks
 * that did not change.
 */
export class MarkdownStream {
  /** The text lexed into `stable` (a prefix of every text since), whose link
   *  definitions are `links`. */
  private prefix = "";
  private stableEnd = 0;
  private stable: Block[] = [];
  private links: Links = Object.create(null) as Links;
  private readonly options: RenderOptions;

  constructor(options: RenderOptions = {}) {
    this.options = normalizeOptions(options);
  }

  update(input: string, whole = false): Block[] {
    const text = normalize(input);
    if (whole || !text.startsWith(this.prefix)) this.reset();
    const blocks = this.step(text, whole) ?? (this.reset(), this.step(text, whole)!);
    return whole ? blocks : markOpenCode(blocks);
  }

  private reset(): void {
    this.prefix = "";
    this.stableEnd = 0;
    this.stable = [];
    this.links = Object.create(null) as Links;
  }

  /** Lex from the first open block; null if earlier blocks must be lexed again. */
  private step(text: string, whole: boolean): Block[] | null {
    const tail = text.slice(this.stableEnd);
    const tokens = lexWith(tail, this.links, this.options.citations);
    const signature = linksSignature(tokens.links);
    const cut = whole ? tokens.length : lastBlockIndex(tokens);
    const done = tokens.slice(0, cut);
    const defs = done.filter((token): token is Tokens.Def => token.type === "def");
    // A new link definition may turn text in an earlier (final) block into a link.
    if (this.stableEnd > 0 && defs.some((def) => !(def.tag in this.links))) return null;
    const consumed = done.map((token) => token.raw).join("");
    // marked's tokens normally cover the text exactly; if not, keep all of it open.
    if (!tail.startsWith(consumed)) return [...this.stable, ...toBlocks(tokens, signature)];
    for (const def of defs) this.links[def.tag] ??= { href: def.href, title: def.title };
    this.stable.push(...toBlocks(done, signature));
    this.stableEnd += consumed.length;
    if (consumed) this.prefix = text.slice(0, this.stableEnd);
    return [...this.stable, ...toBlocks(tokens.slice(cut), signature)];
  }
}

/** The last (open) block, when it is a long code block, as `plain`. */
function markOpenCode(blocks: Block[]): Block[] {
  const last = blocks.at(-1);
  if (!last || last.token.type !== "code" || last.token.raw.length <= HIGHLIGHT_OPEN_MAX) return blocks;
  return [...blocks.slice(0, -1), { ...last, key: `${last.key}\u0001plain`, plain: true }];
}

/** The index of the last token that is not blank space (0 when there is none). */
function lastBlockIndex(tokens: Token[]): number {
  for (let i = tokens.length - 1; i >= 0; i--) if (tokens[i]!.type !== "space") return i;
  return 0;
}

/** All blocks of a finished text. */
export function lexBlocks(text: string, options: RenderOptions = {}): Block[] {
  return new MarkdownStream(options).update(text, true);
}

/** `text` as sanitised HTML (the blocks' HTML, one after another). */
export function renderMarkdown(text: string, options: RenderOptions = {}): string {
  return lexBlocks(text, options).map(renderBlock).join("");
}

/** Options with a prefix that is safe inside an id and an href. */
export function normalizeOptions(options: RenderOptions = {}): RenderOptions {
  const citations = options.citations;
  if (!citations) return {};
  return {
    citations: {
      prefix: citations.prefix.replace(/[^\w-]/g, "_"),
      count: Math.max(0, Math.floor(citations.count)),
    },
  };
}
