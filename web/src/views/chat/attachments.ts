// Files a person attaches to a message (button, drag and drop, paste): images become
// `image_url` parts with a data URL, documents OpenAI `file` parts with the file as a
// data URL; anything else, or too much, is refused with a reason a person reads.
import type { ContentPart } from "./messages";

export const DOCUMENT_TYPES: Record<string, string> = {
  txt: "text/plain",
  md: "text/markdown",
  markdown: "text/markdown",
  html: "text/html",
  htm: "text/html",
  pdf: "application/pdf",
  docx: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
  csv: "text/csv",
  json: "application/json",
};

export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/** What the file picker offers. */
export const ACCEPT = [...IMAGE_TYPES, ...Object.keys(DOCUMENT_TYPES).map((ext) => `.${ext}`)].join(",");

/** The request body may be 10 MB (the server's default `server.max_body_bytes`); base64
 * grows a file by a third, so the files of one message may hold 7 MB in all. */
export const MAX_TOTAL_BYTES = 7 * 1024 * 1024;

export interface Attachment {
  id: string;
  kind: "image" | "file";
  name: string;
  size: number;
  mediaType: string;
  /** `data:<type>;base64,...` */
  dataUrl: string;
}

export type Refusal =
  | { reason: "type"; name: string }
  | { reason: "size"; name: string; limit: number }
  | { reason: "read"; name: string };

export interface Added {
  attachments: Attachment[];
  refused: Refusal[];
}

function extension(name: string): string {
  const dot = name.lastIndexOf(".");
  return dot < 0 ? "" : name.slice(dot + 1).toLowerCase();
}

/** "image", "file" (a document the server reads) or null (not accepted), with the media
 * type to declare. */
export function classify(file: Pick<File, "name" | "type">): { kind: "image" | "file"; mediaType: string } | null {
  const type = (file.type || "").toLowerCase();
  if (IMAGE_TYPES.includes(type)) return { kind: "image", mediaType: type };
  const byExtension = DOCUMENT_TYPES[extension(file.name)];
  if (byExtension) return { kind: "file", mediaType: byExtension };
  return null;
}

export function readDataUrl(file: Blob): Promise<string> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(reader.error ?? new Error("unreadable"));
    reader.readAsDataURL(file);
  });
}

/** The data URL with the declared media type (browsers give documents such as .md an
 * empty or generic type). */
export function withMediaType(dataUrl: string, mediaType: string): string {
  const comma = dataUrl.indexOf(",");
  return `data:${mediaType};base64,${dataUrl.slice(comma + 1)}`;
}

let counter = 0;

/** Read `files` into attachments, after those already `attached`, within the total size. */
export async function addFiles(files: readonly File[], attached: readonly Attachment[]): Promise<Added> {
  const attachments: Attachment[] = [];
  const refused: Refusal[] = [];
  let used = attached.reduce((sum, a) => sum + a.size, 0);
  for (const file of files) {
    const kind = classify(file);
    if (!kind) {
      refused.push({ reason: "type", name: file.name });
      continue;
    }
    if (used + file.size > MAX_TOTAL_BYTES) {
      refused.push({ reason: "size", name: file.name, limit: MAX_TOTAL_BYTES });
      continue;
    }
    try {
      const dataUrl = withMediaType(await readDataUrl(file), kind.mediaType);
      used += file.size;
      attachments.push({
        id: `att-${++counter}`,
        kind: kind.kind,
        name: file.name || (kind.kind === "image" ? "image" : "file"),
        size: file.size,
        mediaType: kind.mediaType,
        dataUrl,
      });
    } catch {
      refused.push({ reason: "read", name: file.name });
    }
  }
  return { attachments, refused };
}

/** A user message's content: the text alone, or text and attachments as content parts. */
export function messageContent(text: string, attachments: readonly Attachment[]): string | ContentPart[] {
  if (!attachments.length) return text;
  const parts: ContentPart[] = text ? [{ type: "text", text }] : [];
  for (const a of attachments) {
    parts.push(
      a.kind === "image"
        ? { type: "image_url", image_url: { url: a.dataUrl } }
        : { type: "file", file: { filename: a.name, file_data: a.dataUrl } },
    );
  }
  return parts;
}

/** The files of a drop or paste event. */
export function filesOf(data: DataTransfer | null): File[] {
  if (!data) return [];
  if (data.files?.length) return Array.from(data.files);
  const files: File[] = [];
  for (const item of Array.from(data.items ?? [])) {
    if (item.kind === "file") {
      const file = item.getAsFile();
      if (file) files.push(file);
    }
  }
  return files;
}

export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(0)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
