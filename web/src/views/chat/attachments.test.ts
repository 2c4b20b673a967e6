import { describe, expect, it } from "vitest";
import { addFiles, classify, filesOf, MAX_TOTAL_BYTES, messageContent, withMediaType, type Attachment } from "./attachments";

function file(content: string, name: string, type = ""): File {
  return new File([content], name, { type });
}

describe("attachments", () => {
  it("classifies images by type and documents by extension", () => {
    expect(classify({ name: "cat.png", type: "image/png" })).toEqual({ kind: "image", mediaType: "image/png" });
    expect(classify({ name: "notes.md", type: "" })).toEqual({ kind: "file", mediaType: "text/markdown" });
    expect(classify({ name: "Report.PDF", type: "application/pdf" })?.kind).toBe("file");
    expect(classify({ name: "x.docx", type: "" })?.mediaType).toBe(
      "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    );
    for (const name of ["a.txt", "a.html", "a.csv", "a.json"]) expect(classify({ name, type: "" })?.kind).toBe("file");
    expect(classify({ name: "run.exe", type: "application/octet-stream" })).toBeNull();
    expect(classify({ name: "vector.svg", type: "image/svg+xml" })).toBeNull();
  });

  it("reads images as image data URLs and documents as data URLs of their type", async () => {
    const { attachments, refused } = await addFiles([file("hello", "hello.txt"), file("PNGDATA", "dot.png", "image/png")], []);
    expect(refused).toEqual([]);
    expect(attachments).toHaveLength(2);
    const [doc, image] = attachments;
    expect(doc).toMatchObject({ kind: "file", name: "hello.txt", size: 5, mediaType: "text/plain" });
    expect(doc.dataUrl).toBe(`data:text/plain;base64,${btoa("hello")}`);
    expect(image.kind).toBe("image");
    expect(image.dataUrl.startsWith("data:image/png;base64,")).toBe(true);
  });

  it("refuses unknown types and files past the size limit, with their names", async () => {
    const big = { size: MAX_TOTAL_BYTES - 10 } as Attachment;
    const { attachments, refused } = await addFiles([file("0123456789abcdef", "big.txt"), file("x", "tool.exe")], [big]);
    expect(attachments).toEqual([]);
    expect(refused).toEqual([
      { reason: "size", name: "big.txt", limit: MAX_TOTAL_BYTES },
      { reason: "type", name: "tool.exe" },
    ]);
  });

  it("builds OpenAI content parts: image_url for images, file with filename and file_data for documents", () => {
    expect(messageContent("just text", [])).toBe("just text");
    const attachments: Attachment[] = [
      { id: "1", kind: "image", name: "a.png", size: 3, mediaType: "image/png", dataUrl: "data:image/png;base64,AAA" },
      { id: "2", kind: "file", name: "b.pdf", size: 3, mediaType: "application/pdf", dataUrl: "data:application/pdf;base64,BBB" },
    ];
    expect(messageContent("look", attachments)).toEqual([
      { type: "text", text: "look" },
      { type: "image_url", image_url: { url: "data:image/png;base64,AAA" } },
      { type: "file", file: { filename: "b.pdf", file_data: "data:application/pdf;base64,BBB" } },
    ]);
    expect(messageContent("", attachments.slice(1))).toEqual([
      { type: "file", file: { filename: "b.pdf", file_data: "data:application/pdf;base64,BBB" } },
    ]);
  });

  it("replaces a browser's generic media type with the declared one", () => {
    expect(withMediaType("data:application/octet-stream;base64,QUJD", "text/markdown")).toBe("data:text/markdown;base64,QUJD");
    expect(withMediaType("data:;base64,QUJD", "text/csv")).toBe("data:text/csv;base64,QUJD");
  });

  it("takes the files of a drop or paste", () => {
    const one = file("a", "a.txt");
    expect(filesOf(null)).toEqual([]);
    expect(filesOf({ files: [one] as unknown as FileList, items: [] as unknown as DataTransferItemList } as DataTransfer)).toEqual([one]);
    const items = [
      { kind: "string", getAsFile: () => null },
      { kind: "file", getAsFile: () => one },
    ];
    expect(filesOf({ files: [] as unknown as FileList, items: items as unknown as DataTransferItemList } as DataTransfer)).toEqual([one]);
  });
});
