import "./markdown.testenv"; // first: makes happy-dom behave like a browser for DOMPurify
import { describe, expect, test, vi } from "vitest";
import {
  isAllowedImage,
  lexBlocks,
  MarkdownStream,
  renderBlock,
  renderMarkdown,
  sanitize,
} from "./markdown";

/** The rendered HTML as a DOM to inspect. */
function dom(markdown: string, citations?: { prefix: string; count: number }): HTMLElement {
  const root = document.createElement("div");
  root.innerHTML = renderMarkdown(markdown, citations ? { citations } : {});
  return root;
}

/** Every attribute of every element, as "tag attr=value" lines. */
function attributes(root: Element): string[] {
  return [...root.querySelectorAll("*")].flatMap((el) =>
    [...el.attributes].map((a) => `${el.tagName.toLowerCase()} ${a.name}=${a.value}`),
  );
}

function expectInert(root: Element): void {
  const lines = attributes(root);
  expect(lines.filter((line) => /\son\w+=/.test(line))).toEqual([]);
  expect(lines.filter((line) => /javascript:|vbscript:|data:text/i.test(line))).toEqual([]);
  expect(lines.filter((line) => /\s(style|id|name|srcset|formaction|action)=/.test(line))).toEqual([]);
  expect(root.querySelector("script, style, iframe, object, embed, form, svg, math, link, meta, base, textarea, select")).toBeNull();
}

describe("sanitiser", () => {
  test("script tags are removed, with their content", () => {
    const root = dom("hello <script>alert(1)</script>\n\n<script>\nalert(2)\n</script>");
    expect(root.querySelector("script")).toBeNull();
    expect(root.textContent).not.toContain("alert");
    expect(root.textContent).toContain("hello");
  });

  test("an image's onerror handler is dropped, and a foreign src with it", () => {
    const root = dom("look <img src=x onerror=alert(1)> and <IMG SRC=x OnError='alert(1)'>");
    expectInert(root);
    for (const img of root.querySelectorAll("img")) expect(img.hasAttribute("src")).toBe(false);
  });

  test("javascript: links lose their href, in Markdown and in raw HTML", () => {
    const root = dom(
      [
        "[click](javascript:alert(1)) [upper](JAVASCRIPT:alert(1))",
        "[spaced](java\tscript:alert(1)) <a href=\"javascript:alert(1)\">raw</a>",
        "<a href=\"jav&#x09;ascript:alert(1)\">entity</a> <a href=\" javascript:alert(1)\">lead</a>",
        "[ref][evil]",
        "",
        "[evil]: javascript:alert(1)",
      ].join("\n"),
    );
    expectInert(root);
    const links = [...root.querySelectorAll("a")];
    expect(links.length).toBeGreaterThanOrEqual(6);
    for (const link of links) expect(link.getAttribute("href") ?? "").not.toMatch(/script/i);
  });

  test("data: links are refused (text/html and even images as links)", () => {
    const root = dom(
      "[a](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) " +
        "<a href=\"data:text/html,<script>alert(1)</script>\">b</a> [c](data:image/png;base64,AAAA)",
    );
    expectInert(root);
    for (const link of root.querySelectorAll("a")) expect(link.hasAttribute("href")).toBe(false);
  });

  test("svg with onload, iframes, forms, objects and styles go", () => {
    const root = dom(
      [
        "<svg onload=alert(1)><circle r=5 /></svg> <svg><script>alert(1)</script></svg>",
        "<iframe></iframe> <object data=x></object> <embed src=x>",
        "<form action=\"https://evil.example\"><input name=q><button formaction=x>Go</button></form>",
        "<math><mi xlink:href=\"javascript:alert(1)\">x</mi></math> <details open ontoggle=alert(1)>d</details>",
        "",
        "<p style=\"color:red\" id=\"x\" name=\"y\">styled</p> <style>body{display:none}</style>",
      ].join("\n"),
    );
    expectInert(root);
    expect(root.querySelector("svg, circle, iframe, object, embed, form")).toBeNull();
    expect(root.textContent).toContain("styled");
    expect(root.querySelector("details")?.hasAttribute("ontoggle")).toBe(false);
  });

  test("raw HTML bringing styles never reaches the parser (a CSP report each): it shows as text", () => {
    const parse = vi.spyOn(DOMParser.prototype, "parseFromString");
    try {
      const hostile = [
        "<style>body{display:none}</style>",
        "",
        "inline <style>p{color:red}</style> and <STYLE media=all>x</STYLE>",
        "",
        "<p style=\"color:red\">styled</p> <span title=\"t\"style='x'>quoted</span> <b/style=x>slashed</b>",
        "",
        "<link rel=stylesheet href=\"https://evil.example/x.css\"> <LINK rel=preload href=x>",
        "",
        "<div>",
        "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
        "</div>",
      ].join("\n");
      const root = dom(hostile);
      const parsed = parse.mock.calls.map((call) => String(call[0]));
      expect(parsed.length).toBeGreaterThan(0);
      // a tag (never escaped text) with a style attribute, a <style> or <link> tag
      for (const html of parsed) expect(html).not.toMatch(/<\/?(?:style|link)(?![\w-])|<[a-z][^<>]*[\s"'/]style\s*=/i);
      expectInert(root);
      expect(root.querySelector("img")).toBeNull(); // the block that held it is text
      expect(root.textContent).toContain("<style>body{display:none}</style>");
      expect(root.textContent).toContain('<p style="color:red">styled</p>');
      expect(root.textContent).toContain("<link rel=stylesheet");
    } finally {
      parse.mockRestore();
    }
  });

  test("raw HTML without styles still goes to the sanitiser as HTML", () => {
    const root = dom("press <kbd>Ctrl</kbd>+<kbd>K</kbd>, a <span class=\"md-x\">stylish</span> <em title=\"a style\">linked</em> word");
    expect(root.querySelectorAll("kbd")).toHaveLength(2);
    expect(root.querySelector("span.md-x")?.textContent).toBe("stylish");
    expect(root.querySelector("em")?.getAttribute("title")).toBe("a style");
    expect(root.textContent).not.toContain("<");
  });

  test("buttons and inputs from the model do not survive as controls", () => {
    const root = dom('<button class="primary" onclick="x()">Approve</button> <input type="text" value="k">');
    expect(root.querySelector("button")).toBeNull();
    expect(root.querySelector("input")).toBeNull();
    expect(root.textContent).toContain("Approve"); // its text stays, inert
  });

  test("class names outside the renderer's vocabulary are dropped", () => {
    const root = dom('<span class="primary danger md-x hljs-string">a</span>');
    expect(root.querySelector("span")?.getAttribute("class")).toBe("md-x hljs-string");
  });

  test("links get rel=noopener noreferrer and target=_blank; in-page links stay in the page", () => {
    const root = dom("[site](https://example.com) <https://a.example> www.b.example <a href=\"https://c.example\" target=\"_self\" rel=\"opener\">c</a> [here](#top)");
    const links = [...root.querySelectorAll("a")];
    expect(links.map((a) => a.getAttribute("href"))).toEqual([
      "https://example.com",
      "https://a.example",
      "http://www.b.example",
      "https://c.example",
      "#top",
    ]);
    for (const link of links) expect(link.getAttribute("rel")).toBe("noopener noreferrer");
    expect(links.slice(0, 4).map((a) => a.getAttribute("target"))).toEqual(["_blank", "_blank", "_blank", "_blank"]);
    expect(links[4]!.hasAttribute("target")).toBe(false);
  });

  test("images load only from /v1/files/ or as inline raster data", () => {
    const png = "data:image/png;base64,iVBORw0KGgo=";
    const root = dom(
      `![ours](/v1/files/file_1) ![inline](${png}) ![far](https://tracker.example/p.gif) ` +
        "![svg](data:image/svg+xml;base64,PHN2Zz4=) <img src=\"https://tracker.example/x.gif\" alt=\"raw\">",
    );
    const images = [...root.querySelectorAll("img")];
    expect(images.map((img) => img.getAttribute("src"))).toEqual(["/v1/files/file_1", png, null]);
    // A foreign image in Markdown becomes a link the reader may follow.
    expect(root.querySelector('a[href="https://tracker.example/p.gif"]')?.textContent).toBe("far");
    expect(root.textContent).toContain("svg");
    expect(isAllowedImage("/v1/files/../keys")).toBe(false);
    expect(isAllowedImage("//evil.example/v1/files/x")).toBe(false);
    expect(isAllowedImage(`${location.origin}/v1/files/x`)).toBe(true);
  });

  test("GFM: tables, task lists, strikethrough, autolinks", () => {
    const root = dom("| a | b |\n|:--|--:|\n| 1 | 2 |\n\n- [x] done\n- [ ] todo\n\n~~gone~~ https://x.example");
    expect(root.querySelectorAll("table th").length).toBe(2);
    expect(root.querySelector("td")?.getAttribute("align")).toBe("left");
    const boxes = [...root.querySelectorAll("input")];
    expect(boxes.map((box) => [box.type, box.disabled, box.checked])).toEqual([
      ["checkbox", true, true],
      ["checkbox", true, false],
    ]);
    expect(root.querySelector("del")?.textContent).toBe("gone");
    expect(root.querySelector('a[href="https://x.example"]')).not.toBeNull();
  });

  test("sanitize alone strips what the renderer never makes", () => {
    expect(sanitize('<b onclick="x">b</b><script>y</script>')).toBe("<b>b</b>");
  });
});

describe("code blocks", () => {
  test("are highlighted, labelled and get a copy button", () => {
    const root = dom("```python\ndef f(x):\n    return '<b>' # note\n```");
    const block = root.querySelector(".md-code")!;
    expect(block.querySelector(".md-code-lang")?.textContent).toBe("python");
    const code = block.querySelector("pre code")!;
    expect(code.className).toBe("hljs language-python");
    expect(code.querySelector(".hljs-keyword")?.textContent).toBe("def");
    expect(code.querySelector(".hljs-string")?.textContent).toBe("'<b>'");
    expect(code.querySelector(".hljs-comment")?.textContent).toBe("# note");
    expect(code.textContent).toBe("def f(x):\n    return '<b>' # note\n");
    const button = block.querySelector("button.md-copy")!;
    expect(button.getAttribute("aria-label")).toBe("Copy code");
    expect(button.getAttribute("type")).toBe("button");
    expect([...button.attributes].map((a) => a.name).sort()).toEqual(["aria-label", "class", "type"]);
  });

  test("know the registered languages and their aliases", () => {
    for (const lang of ["js", "ts", "json", "bash", "shell", "sh", "sql", "yaml", "html", "xml", "css", "go", "rust", "java", "c", "cpp", "diff", "markdown", "py"]) {
      const root = dom(`\`\`\`${lang}\nx\n\`\`\``);
      expect(root.querySelector("code")?.className, lang).toMatch(/^hljs language-/);
    }
  });

  test("an unknown or missing language is shown as escaped text", () => {
    const root = dom("```brainfuck\n<script>alert(1)</script>\n```\n\n```\nplain <b>\n```");
    expect(root.querySelector("script, b")).toBeNull();
    const codes = [...root.querySelectorAll("pre code")];
    expect(codes.map((c) => c.className)).toEqual(["hljs", "hljs"]);
    expect(codes[0]!.textContent).toBe("<script>alert(1)</script>\n");
    expect([...root.querySelectorAll(".md-code-lang")].map((l) => l.textContent)).toEqual(["brainfuck", "text"]);
  });

  test("a long code block is coloured once it is complete, not while it streams", () => {
    const body = "x = 1\n".repeat(800);
    const stream = new MarkdownStream();
    const open = stream.update(`Intro\n\n\`\`\`python\n${body}`);
    expect(open.at(-1)!.plain).toBe(true);
    const plain = document.createElement("div");
    plain.innerHTML = renderBlock(open.at(-1)!);
    expect(plain.querySelector(".hljs-number")).toBeNull();
    expect(plain.querySelector("code")?.className).toBe("hljs language-python");
    const done = stream.update(`Intro\n\n\`\`\`python\n${body}\`\`\`\n\nAfter`);
    const code = done.find((block) => block.token.type === "code")!;
    expect(code.plain).toBeUndefined();
    expect(code.key).not.toBe(open.at(-1)!.key); // so its node is rebuilt, coloured
    expect(renderBlock(code)).toContain("hljs-number");
    // A short open code block is coloured as it streams.
    expect(new MarkdownStream().update("```python\nx = 1").at(-1)!.plain).toBeUndefined();
  });

  test("a fence still open (streaming) renders as code", () => {
    const root = dom("Intro\n\n```js\nconst a = 1;\nconst b");
    expect(root.querySelector("pre code.language-js")?.textContent).toBe("const a = 1;\nconst b\n");
  });
});

describe("citations", () => {
  const cites = { prefix: "cite-m1", count: 2 };

  test("markers within 1..count link to the sources list", () => {
    const root = dom("A [1], B [2] and [^1]; C [3] and [0].", cites);
    const links = [...root.querySelectorAll("a.cite")];
    expect(links.map((a) => a.getAttribute("href"))).toEqual(["#cite-m1-1", "#cite-m1-2", "#cite-m1-1"]);
    expect(links.map((a) => a.getAttribute("aria-label"))).toEqual(["Source 1", "Source 2", "Source 1"]);
    expect(links.every((a) => !a.hasAttribute("target"))).toBe(true);
    expect(root.textContent).toContain("[3]");
    expect(root.textContent).toContain("[0]");
  });

  test("a list of markers links each; one out of range keeps the list as text", () => {
    const root = dom("both [1, 2] and [1, 5]", cites);
    expect([...root.querySelectorAll("a.cite")].map((a) => a.textContent)).toEqual(["1", "2"]);
    expect(root.textContent).toContain("[1, 5]");
  });

  test("no citations, no links; code, link texts and real links are left alone", () => {
    expect(dom("see [1]").querySelector("a")).toBeNull();
    const root = dom("`[1]` and [1](https://x.example) and [see [2]](https://y.example)\n\n```\n[1]\n```", cites);
    expect(root.querySelectorAll("a.cite").length).toBe(0);
    expect(root.querySelector('a[href="https://x.example"]')?.textContent).toBe("1");
  });

  test("a reference definition of the number wins", () => {
    const root = dom("see [1]\n\n[1]: https://ref.example", cites);
    expect(root.querySelector("a.cite")).toBeNull();
    expect(root.querySelector('a[href="https://ref.example"]')).not.toBeNull();
  });

  test("the prefix cannot break out of the href", () => {
    const root = dom("x [1]", { prefix: '"><img src=x onerror=alert(1)>', count: 1 });
    expectInert(root);
    expect(root.querySelector("a.cite")?.getAttribute("href")).toMatch(/^#[\w-]+-1$/);
  });
});

describe("blocks", () => {
  const doc = [
    "# Title",
    "",
    "Intro with a [link][ref] and **bold**.",
    "",
    "- one",
    "- two",
    "",
    "  continued",
    "- three",
    "",
    "Setext",
    "------",
    "",
    "```js",
    "let a = 1;",
    "```",
    "",
    "| a | b |",
    "|---|---|",
    "| 1 | 2 |",
    "",
    "[ref]: https://ref.example",
    "",
    "> quoted",
    "> text",
    "",
    "Last paragraph.",
  ].join("\n");

  test("renderMarkdown is the blocks' HTML one after another", () => {
    const blocks = lexBlocks(doc);
    expect(blocks.map((b) => b.token.type)).toEqual([
      "heading", "paragraph", "list", "heading", "code", "table", "blockquote", "paragraph",
    ]);
    expect(renderMarkdown(doc)).toBe(blocks.map(renderBlock).join(""));
  });

  test("streaming a character at a time ends with the one-shot blocks", () => {
    const stream = new MarkdownStream();
    let blocks = stream.update("");
    for (let end = 1; end <= doc.length; end++) blocks = stream.update(doc.slice(0, end));
    const whole = lexBlocks(doc);
    expect(blocks.map((b) => b.key)).toEqual(whole.map((b) => b.key));
    expect(blocks.map(renderBlock)).toEqual(whole.map(renderBlock));
  });

  test("at every length of a tricky text, the streamed blocks are the one-shot blocks", () => {
    const tricky = [
      "Para line one",
      "lazy continuation",
      "===",
      "",
      "Under a paragraph",
      "---",
      "",
      "---",
      "",
      "- a",
      "- b",
      "",
      "- c after a blank (loose now)",
      "",
      "    indented code after a list",
      "",
      "Text then",
      "    not code (lazy)",
      "",
      "3) three",
      "4) four",
      "",
      "~~~",
      "tilde fence",
      "~~~",
      "",
      "<div>",
      "html *block*",
      "</div>",
      "",
      "> quote",
      "> - list in quote",
      "lazy quote line",
      "",
      "| h1 | h2 |",
      "| -- | -- |",
      "| c1 | c2 |",
      "after table",
      "",
      "hard  ",
      "break and *emphasis",
      "over lines* [^1] [2]",
      "",
      "[^1]: a footnote-like line",
      "",
      "Done.",
    ].join("\n");
    const options = { citations: { prefix: "p", count: 2 } };
    const stream = new MarkdownStream(options);
    let compared = 0;
    for (let end = 0; end <= tricky.length; end++) {
      const prefix = tricky.slice(0, end);
      const keys = stream.update(prefix).map((b) => b.key);
      // Known difference: a link definition still being written (the last block) applies
      // to the earlier blocks only once it is complete (or the reply ended).
      if (/^\[[^\]]+\]:/.test(prefix.split("\n\n").pop()!)) continue;
      expect(keys, JSON.stringify(prefix.slice(-30))).toEqual(lexBlocks(prefix, options).map((b) => b.key));
      compared++;
    }
    expect(compared).toBeGreaterThan(tricky.length - 40);
    expect(stream.update(tricky, true).map((b) => b.key)).toEqual(lexBlocks(tricky, options).map((b) => b.key));
  });

  test("final blocks are the same objects from update to update", () => {
    const stream = new MarkdownStream();
    const first = stream.update("One.\n\nTwo.\n\nThr");
    const second = stream.update("One.\n\nTwo.\n\nThree, and");
    expect(second[0]).toBe(first[0]);
    expect(second[1]).toBe(first[1]);
    expect(second[2]!.key).toBe("Three, and");
    // The whole text lexed again keeps the keys of unchanged blocks.
    const again = stream.update("One.\n\nTwo.\n\nThree, and", true);
    expect(again.map((b) => b.key)).toEqual(second.map((b) => b.key));
  });

  test("a text that does not continue the previous one is lexed afresh", () => {
    const stream = new MarkdownStream();
    stream.update("Alpha.\n\nBeta.\n\nGam");
    expect(stream.update("Other.\n\nText").map((b) => b.key)).toEqual(["Other.", "Text"]);
  });

  test("a link definition arriving late links the earlier text", () => {
    const stream = new MarkdownStream();
    stream.update("See [doc].\n\nMore text.\n\n");
    const blocks = stream.update("See [doc].\n\nMore text.\n\n[doc]: https://doc.example\n\nEnd");
    expect(renderBlock(blocks[0]!)).toContain('href="https://doc.example"');
  });

  test("CRLF line ends are the same as LF", () => {
    expect(renderMarkdown("a\r\n\r\n- b\r\n- c")).toBe(renderMarkdown("a\n\n- b\n- c"));
  });
});
