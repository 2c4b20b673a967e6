// Which files an upload sends: those picked (<input type=file multiple>), those of a
// picked folder (<input webkitdirectory>: each File has its webkitRelativePath), and those
// dropped (files and folders: DataTransfer items walked with webkitGetAsEntry). Inside a
// folder, hidden entries (.git, .DS_Store) and files of a type Parley cannot read are
// skipped, as `parley kb ingest` does; a file picked by itself is always sent (the server
// says why it cannot read it). Files go in batches, as the command line sends them.

export interface PickedFile {
  file: File;
  /** Where the file was in what was picked: "notes/a.md" inside a folder, else its name. */
  path: string;
}

export interface FileSelection {
  files: PickedFile[];
  /** Paths left out: hidden, or not a document type. */
  skipped: string[];
}

/** The extensions Parley reads (src/parley/knowledge/extract.py). */
export const SUPPORTED_EXTENSIONS = [
  ".txt",
  ".text",
  ".log",
  ".md",
  ".markdown",
  ".mdown",
  ".html",
  ".htm",
  ".xhtml",
  ".pdf",
  ".docx",
  ".csv",
  ".tsv",
  ".json",
] as const;

/** For the file picker's `accept`. */
export const ACCEPT = SUPPORTED_EXTENSIONS.join(",");

export function extension(name: string): string {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(dot).toLowerCase() : "";
}

export function isSupported(name: string): boolean {
  return (SUPPORTED_EXTENSIONS as readonly string[]).includes(extension(name));
}

export function segments(path: string): string[] {
  return path.split("/").filter(Boolean);
}

/** Hidden inside what was picked: a part of the path after the picked folder itself
 * starts with a dot. */
export function isHidden(path: string): boolean {
  return segments(path)
    .slice(1)
    .some((part) => part.startsWith("."));
}

/** The last part of a path: the name the server keeps (it stores no folders). */
export function baseName(path: string): string {
  const parts = segments(path.replace(/\\/g, "/"));
  return parts[parts.length - 1] ?? path;
}

/** What a picked list becomes: folder contents filtered, duplicates (same path) dropped,
 * a folder's files in path order. */
export function buildFileList(picked: PickedFile[], alreadySkipped: string[] = []): FileSelection {
  const files: PickedFile[] = [];
  const skipped: string[] = [...alreadySkipped];
  const seen = new Set<string>();
  for (const item of picked) {
    if (seen.has(item.path)) continue;
    seen.add(item.path);
    const inFolder = segments(item.path).length > 1;
    if (inFolder && (isHidden(item.path) || !isSupported(item.path))) {
      skipped.push(item.path);
      continue;
    }
    files.push(item);
  }
  const collator = new Intl.Collator(undefined, { numeric: true });
  const order = (a: PickedFile, b: PickedFile) => {
    const folderA = segments(a.path).length > 1;
    const folderB = segments(b.path).length > 1;
    // loose files keep the order they were picked in, before folders
    if (!folderA || !folderB) return Number(folderA) - Number(folderB);
    return collator.compare(a.path, b.path);
  };
  return { files: files.slice().sort(order), skipped };
}

/** The files of an <input type=file>, with their folder paths when a folder was picked. */
export function fromFileList(list: FileList | readonly File[]): PickedFile[] {
  return Array.from(list, (file) => ({
    file,
    path: (file as File & { webkitRelativePath?: string }).webkitRelativePath || file.name,
  }));
}

function fileOf(entry: FileSystemFileEntry): Promise<File> {
  return new Promise((resolve, reject) => entry.file(resolve, reject));
}

/** Every entry of a directory: readEntries answers in batches (100 in Chromium) until an
 * empty one. */
export async function readAll(directory: FileSystemDirectoryEntry): Promise<FileSystemEntry[]> {
  const reader = directory.createReader();
  const all: FileSystemEntry[] = [];
  for (;;) {
    const batch = await new Promise<FileSystemEntry[]>((resolve, reject) =>
      reader.readEntries(resolve, reject),
    );
    if (!batch.length) return all;
    all.push(...batch);
  }
}

/** The files under `entry` (itself when it is a file), each with its path from the
 * dropped item. Hidden folders inside are not entered (a .git folder can hold thousands
 * of files): their paths go to `skipped`. */
export async function walkEntry(
  entry: FileSystemEntry,
  prefix = "",
  skipped: string[] = [],
): Promise<PickedFile[]> {
  const path = prefix ? `${prefix}/${entry.name}` : entry.name;
  if (entry.isFile) {
    return [{ file: await fileOf(entry as FileSystemFileEntry), path }];
  }
  if (!entry.isDirectory) return [];
  if (prefix && entry.name.startsWith(".")) {
    skipped.push(`${path}/`);
    return [];
  }
  const found: PickedFile[] = [];
  for (const child of await readAll(entry as FileSystemDirectoryEntry)) {
    found.push(...(await walkEntry(child, path, skipped)));
  }
  return found;
}

/** Capture what was dropped. Must run during the drop event: the DataTransfer's items
 * are emptied once the handler returns, so the entries are taken before any await. */
export function droppedEntries(data: DataTransfer): { entries: FileSystemEntry[]; files: File[] } {
  const entries: FileSystemEntry[] = [];
  const files: File[] = [];
  const items = data.items ? Array.from(data.items) : [];
  for (const item of items) {
    if (item.kind !== "file") continue;
    const entry = typeof item.webkitGetAsEntry === "function" ? item.webkitGetAsEntry() : null;
    if (entry) {
      entries.push(entry);
    } else {
      const file = item.getAsFile();
      if (file) files.push(file);
    }
  }
  if (!items.length && data.files) files.push(...Array.from(data.files));
  return { entries, files };
}

/** The files of a drop, folders walked and filtered. Call it from the drop handler
 * itself (it reads the DataTransfer before its first await). */
export async function filesFromDrop(data: DataTransfer): Promise<FileSelection> {
  const { entries, files } = droppedEntries(data);
  const found: PickedFile[] = files.map((file) => ({ file, path: file.name }));
  const skipped: string[] = [];
  for (const entry of entries) found.push(...(await walkEntry(entry, "", skipped)));
  return buildFileList(found, skipped);
}

export const BATCH_FILES = 8;
export const BATCH_BYTES = 20 * 1024 * 1024;

/** Consecutive groups of at most `maxFiles` files and `maxBytes` bytes (a larger file
 * goes alone). */
export function batches<T extends { size: number }>(
  items: readonly T[],
  maxFiles = BATCH_FILES,
  maxBytes = BATCH_BYTES,
): T[][] {
  const out: T[][] = [];
  let batch: T[] = [];
  let bytes = 0;
  for (const item of items) {
    if (batch.length && (batch.length >= maxFiles || bytes + item.size > maxBytes)) {
      out.push(batch);
      batch = [];
      bytes = 0;
    }
    batch.push(item);
    bytes += item.size;
  }
  if (batch.length) out.push(batch);
  return out;
}
