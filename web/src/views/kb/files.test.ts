import { describe, expect, it } from "vitest";
import {
  baseName,
  batches,
  buildFileList,
  droppedEntries,
  filesFromDrop,
  fromFileList,
  isHidden,
  isSupported,
  readAll,
  walkEntry,
  type PickedFile,
} from "./files";

// Fake FileSystem entries, as webkitGetAsEntry gives them; a directory's reader answers
// in batches of `per` (Chromium: 100) then an empty batch, as the real one does.
type Tree = { [name: string]: string | Tree };

function fileEntry(name: string, content: string, fullPath: string): FileSystemFileEntry {
  return {
    isFile: true,
    isDirectory: false,
    name,
    fullPath,
    file: (ok: (file: File) => void) => ok(new File([content], name, { type: "text/plain" })),
  } as unknown as FileSystemFileEntry;
}

let readCalls = 0;

function dirEntry(name: string, tree: Tree, fullPath = `/${name}`, per = 2): FileSystemDirectoryEntry {
  const children = Object.entries(tree).map(([child, value]) =>
    typeof value === "string"
      ? fileEntry(child, value, `${fullPath}/${child}`)
      : dirEntry(child, value, `${fullPath}/${child}`, per),
  );
  return {
    isFile: false,
    isDirectory: true,
    name,
    fullPath,
    createReader: () => {
      let offset = 0;
      return {
        readEntries: (ok: (entries: FileSystemEntry[]) => void) => {
          readCalls += 1;
          const batch = children.slice(offset, offset + per);
          offset += per;
          setTimeout(() => ok(batch), 0);
        },
      };
    },
  } as unknown as FileSystemDirectoryEntry;
}

const picked = (path: string, content = "x"): PickedFile => ({
  file: new File([content], baseName(path)),
  path,
});

describe("file types and paths", () => {
  it("knows the document extensions Parley reads, case-insensitively", () => {
    for (const name of ["a.md", "b.PDF", "c.docx", "d.csv", "e.json", "f.html", "g.txt", "h.tsv"]) {
      expect(isSupported(name)).toBe(true);
    }
    for (const name of ["photo.png", "archive.zip", "Makefile", ".md", "sheet.xlsx"]) {
      expect(isSupported(name)).toBe(false);
    }
  });

  it("calls hidden what is hidden inside the picked folder, not the folder itself", () => {
    expect(isHidden("docs/.git/config")).toBe(true);
    expect(isHidden("docs/.DS_Store")).toBe(true);
    expect(isHidden("docs/guide/intro.md")).toBe(false);
    expect(isHidden(".notes/a.md")).toBe(false); // a hidden folder picked on purpose
  });

  it("keeps the last part of a path as the name", () => {
    expect(baseName("a/b/c.md")).toBe("c.md");
    expect(baseName("c.md")).toBe("c.md");
    expect(baseName("a\\b\\c.md")).toBe("c.md");
  });
});

describe("buildFileList", () => {
  it("skips hidden and non-document files inside folders, keeps files picked alone", () => {
    const { files, skipped } = buildFileList([
      picked("notes.md"),
      picked("photo.png"), // picked alone: sent, the server says why it cannot read it
      picked("docs/b.md"),
      picked("docs/.git/HEAD"),
      picked("docs/.DS_Store"),
      picked("docs/img/logo.png"),
      picked("docs/a.pdf"),
    ]);
    expect(files.map((f) => f.path)).toEqual(["notes.md", "photo.png", "docs/a.pdf", "docs/b.md"]);
    expect(skipped).toEqual(["docs/.git/HEAD", "docs/.DS_Store", "docs/img/logo.png"]);
  });

  it("orders a folder's files by path, numbers naturally, and drops duplicates", () => {
    const { files } = buildFileList([
      picked("d/ch10.md"),
      picked("d/ch2.md"),
      picked("d/ch1.md"),
      picked("d/ch2.md"),
    ]);
    expect(files.map((f) => f.path)).toEqual(["d/ch1.md", "d/ch2.md", "d/ch10.md"]);
  });

  it("uses webkitRelativePath for a picked folder, the name for picked files", () => {
    const loose = new File(["a"], "a.md");
    const inFolder = new File(["b"], "b.md");
    Object.defineProperty(inFolder, "webkitRelativePath", { value: "folder/sub/b.md" });
    expect(fromFileList([loose, inFolder]).map((f) => f.path)).toEqual(["a.md", "folder/sub/b.md"]);
  });
});

describe("walking dropped folders", () => {
  it("reads a directory until its reader gives an empty batch", async () => {
    readCalls = 0;
    const dir = dirEntry("d", { "1.md": "1", "2.md": "2", "3.md": "3", "4.md": "4", "5.md": "5" }, "/d", 2);
    const entries = await readAll(dir);
    expect(entries.map((e) => e.name)).toEqual(["1.md", "2.md", "3.md", "4.md", "5.md"]);
    expect(readCalls).toBe(4); // 2 + 2 + 1 + the empty one
  });

  it("walks nested folders with their paths, not entering hidden ones", async () => {
    const skipped: string[] = [];
    const root = dirEntry("handbook", {
      "intro.md": "hello",
      leave: { "parental.md": "p", "sick.txt": "s", deep: { "x.json": "{}" } },
      ".git": { HEAD: "ref", objects: { a: "b" } },
    });
    const files = await walkEntry(root, "", skipped);
    expect(files.map((f) => f.path).sort()).toEqual([
      "handbook/intro.md",
      "handbook/leave/deep/x.json",
      "handbook/leave/parental.md",
      "handbook/leave/sick.txt",
    ]);
    expect(skipped).toEqual(["handbook/.git/"]);
    const intro = files.find((f) => f.path === "handbook/intro.md")!;
    expect(await intro.file.text()).toBe("hello");
  });

  it("takes a drop's entries synchronously and builds the list from files and folders", async () => {
    const folder = dirEntry("docs", { "a.md": "a", "logo.png": "png", sub: { "b.csv": "1,2" } });
    const loose = fileEntry("loose.txt", "t", "/loose.txt");
    const items = [
      { kind: "file", webkitGetAsEntry: () => loose, getAsFile: () => null },
      { kind: "file", webkitGetAsEntry: () => folder, getAsFile: () => null },
      { kind: "string", webkitGetAsEntry: () => null, getAsFile: () => null },
    ];
    let live = true; // the DataTransfer empties once the drop handler returns
    const data = {
      get items() {
        return live ? items : [];
      },
      files: [],
    } as unknown as DataTransfer;
    const pending = filesFromDrop(data);
    live = false;
    const { files, skipped } = await pending;
    expect(files.map((f) => f.path)).toEqual(["loose.txt", "docs/a.md", "docs/sub/b.csv"]);
    expect(skipped).toEqual(["docs/logo.png"]);
  });

  it("falls back to getAsFile, then to the files list, without entries", () => {
    const file = new File(["x"], "x.md");
    const withItems = {
      items: [{ kind: "file", getAsFile: () => file }],
      files: [],
    } as unknown as DataTransfer;
    expect(droppedEntries(withItems).files).toEqual([file]);
    const filesOnly = { items: undefined, files: [file] } as unknown as DataTransfer;
    expect(droppedEntries(filesOnly).files).toEqual([file]);
  });
});

describe("batches", () => {
  it("groups by count and bytes, a large file alone", () => {
    const sizes = [5, 5, 5, 50, 5, 5, 5, 5, 5];
    const groups = batches(sizes.map((size) => ({ size })), 3, 20);
    expect(groups.map((g) => g.map((f) => f.size))).toEqual([[5, 5, 5], [50], [5, 5, 5], [5, 5]]);
  });

  it("gives nothing for nothing", () => {
    expect(batches([])).toEqual([]);
  });
});
