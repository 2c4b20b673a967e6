import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../../api";
import { contentUrl, uploadFiles } from "./kbApi";

// A stand-in XMLHttpRequest: records what is sent, and lets the test answer.
class FakeXhr {
  static last: FakeXhr;
  method = "";
  url = "";
  headers: Record<string, string> = {};
  body: FormData | null = null;
  status = 0;
  statusText = "";
  responseText = "";
  upload: { onprogress: ((e: { lengthComputable: boolean; loaded: number; total: number }) => void) | null } = {
    onprogress: null,
  };
  onload: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onabort: (() => void) | null = null;
  constructor() {
    FakeXhr.last = this;
  }
  open(method: string, url: string) {
    this.method = method;
    this.url = url;
  }
  setRequestHeader(name: string, value: string) {
    this.headers[name] = value;
  }
  send(body: FormData) {
    this.body = body;
  }
  abort() {
    this.onabort?.();
  }
  answer(status: number, body: unknown) {
    this.status = status;
    this.responseText = JSON.stringify(body);
    this.onload?.();
  }
}

afterEach(() => vi.unstubAllGlobals());

describe("uploadFiles", () => {
  it("posts the files as multipart `files` fields and reports bytes sent", async () => {
    vi.stubGlobal("XMLHttpRequest", FakeXhr);
    const progress = vi.fn();
    const a = new File(["aa"], "a.md");
    const b = new File(["bbb"], "b.md");
    const pending = uploadFiles("kb 1", [{ file: a, name: "a.md" }, { file: b, name: "b.md" }], progress);
    const xhr = FakeXhr.last;
    expect(xhr.method).toBe("POST");
    expect(xhr.url).toBe("/v1/knowledge_bases/kb%201/documents");
    const sent = xhr.body!.getAll("files") as File[];
    expect(sent.map((f) => f.name)).toEqual(["a.md", "b.md"]);
    xhr.upload.onprogress?.({ lengthComputable: true, loaded: 10, total: 40 });
    expect(progress).toHaveBeenCalledWith(10, 40);
    xhr.answer(202, { object: "list", data: [], failed_files: [] });
    await expect(pending).resolves.toEqual({ object: "list", data: [], failed_files: [] });
  });

  it("rejects with the server's message when every file is refused", async () => {
    vi.stubGlobal("XMLHttpRequest", FakeXhr);
    const pending = uploadFiles("kb_1", [{ file: new File([""], "e.md"), name: "e.md" }], () => {});
    FakeXhr.last.answer(400, {
      error: { message: "no file was accepted: e.md: e.md is empty", code: "empty_file", param: "files" },
    });
    const error = await pending.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).message).toBe("no file was accepted: e.md: e.md is empty");
    expect((error as ApiError).code).toBe("empty_file");
  });

  it("tells the app when the session ended, and stops on abort", async () => {
    vi.stubGlobal("XMLHttpRequest", FakeXhr);
    const ended = vi.fn();
    addEventListener("parley:unauthorized", ended);
    const first = uploadFiles("kb_1", [{ file: new File(["x"], "x.md"), name: "x.md" }], () => {});
    FakeXhr.last.answer(401, { error: { message: "sign in" } });
    await expect(first).rejects.toThrow("sign in");
    expect(ended).toHaveBeenCalledTimes(1);
    removeEventListener("parley:unauthorized", ended);

    const controller = new AbortController();
    const second = uploadFiles("kb_1", [{ file: new File(["x"], "x.md"), name: "x.md" }], () => {}, controller.signal);
    controller.abort();
    await expect(second).rejects.toMatchObject({ name: "AbortError" });
  });

  it("builds the content link from ids, escaped", () => {
    expect(contentUrl("kb_1", "doc/../x")).toBe("/v1/knowledge_bases/kb_1/documents/doc%2F..%2Fx/content");
  });
});
