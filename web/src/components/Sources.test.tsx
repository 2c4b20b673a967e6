import { cleanup, render, screen } from "@testing-library/preact";
import { afterEach, describe, expect, test } from "vitest";
import type { Citation } from "../types";
import { documentUrl, formatScore, Sources } from "./Sources";

afterEach(cleanup);

function citation(extra: Partial<Citation>): Citation {
  return {
    rank: 1,
    source: "context",
    chunk_id: 3,
    document_id: "doc_1",
    knowledge_base_id: "kb_1",
    title: "handbook.pdf",
    score: 0.01642,
    excerpt: "The exact passage.",
    page: 4,
    section: "Leave > Annual",
    ...extra,
  };
}

describe("Sources", () => {
  test("a numbered list whose ids the citation markers link to", () => {
    const { container } = render(
      <Sources
        prefix="cite-m1"
        citations={[citation({ rank: 2, title: "b.md", page: null, section: null, score: null }), citation({})]}
      />,
    );
    expect(screen.getByRole("region", { name: "Sources" })).not.toBeNull();
    const items = [...container.querySelectorAll("li")];
    expect(items.map((li) => li.id)).toEqual(["cite-m1-1", "cite-m1-2"]);
    expect(items[0]!.querySelector(".source-rank")?.textContent).toBe("1");
    expect(items[0]!.querySelector(".source-title")?.textContent).toBe("handbook.pdf");
    expect(items[0]!.querySelector(".source-meta")?.textContent).toBe("page 4 · Leave > Annual · score 0.0164");
    expect(items[1]!.querySelector(".source-meta")).toBeNull();
    expect(items[0]!.tabIndex).toBe(-1); // focusable when a marker jumps to it
  });

  test("the exact passage is in a collapsible block", () => {
    const { container } = render(<Sources prefix="p" citations={[citation({ excerpt: "Line one\nline two" })]} />);
    const details = container.querySelector("details")!;
    expect(details.open).toBe(false);
    expect(details.querySelector("summary")?.textContent).toBe("Passage sent to the model");
    expect(details.querySelector("blockquote")?.textContent).toBe("Line one\nline two");
  });

  test("Open document links to the document's content in a new tab", () => {
    render(<Sources prefix="p" citations={[citation({ knowledge_base_id: "kb 1", document_id: "d/2" })]} />);
    const link = screen.getByRole("link", { name: "Open document: handbook.pdf" });
    expect(link.getAttribute("href")).toBe("/v1/knowledge_bases/kb%201/documents/d%2F2/content");
    expect(link.getAttribute("target")).toBe("_blank");
    expect(link.getAttribute("rel")).toBe("noopener noreferrer");
    expect(link.textContent).toBe("Open document");
  });

  test("no link without both ids", () => {
    expect(documentUrl(citation({ document_id: null }))).toBeNull();
    expect(documentUrl(citation({ knowledge_base_id: null }))).toBeNull();
    const { container } = render(<Sources prefix="p" citations={[citation({ document_id: null })]} />);
    expect(container.querySelector("a")).toBeNull();
  });

  test("a document named with HTML shows as those characters", () => {
    const evil = "<img src=x onerror=alert(1)>";
    const { container } = render(
      <Sources prefix="p" citations={[citation({ title: evil, section: evil, excerpt: `<script>alert(1)</script>${evil}` })]} />,
    );
    expect(container.querySelector("img, script")).toBeNull();
    expect(container.querySelector(".source-title")?.textContent).toBe(evil);
    expect(container.querySelector("blockquote")?.textContent).toBe(`<script>alert(1)</script>${evil}`);
  });

  test("no citations, nothing; a source without a title says so", () => {
    const { container } = render(<Sources prefix="p" citations={[]} />);
    expect(container.innerHTML).toBe("");
    render(<Sources prefix="q" citations={[citation({ title: "" })]} />);
    expect(screen.getByText("Untitled source")).not.toBeNull();
  });

  test("scores keep three significant digits", () => {
    expect(formatScore(0.8312)).toBe("0.831");
    expect(formatScore(0.016421)).toBe("0.0164");
    expect(formatScore(12)).toBe("12");
  });
});
