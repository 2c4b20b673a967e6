import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { setLang } from "../../i18n";
import { Composer } from "./Composer";
import { canSend, composerKey } from "./keys";

beforeEach(() => setLang("en"));
afterEach(cleanup);

describe("composer keys", () => {
  const key = (k: string, extra: Record<string, unknown> = {}) => ({ key: k, shiftKey: false, ...extra });

  it("Enter sends, Shift+Enter and Alt+Enter do not", () => {
    expect(composerKey(key("Enter"), false)).toBe("send");
    expect(composerKey(key("Enter", { ctrlKey: true }), false)).toBe("send");
    expect(composerKey(key("Enter", { shiftKey: true }), false)).toBeNull();
    expect(composerKey(key("Enter", { altKey: true }), false)).toBeNull();
    expect(composerKey(key("a"), false)).toBeNull();
  });

  it("Enter that ends an input method's composition is not a send", () => {
    expect(composerKey(key("Enter", { isComposing: true }), false)).toBeNull();
    expect(composerKey(key("Enter", { keyCode: 229 }), false)).toBeNull();
  });

  it("Esc stops a reply, and only while one runs", () => {
    expect(composerKey(key("Escape"), true)).toBe("stop");
    expect(composerKey(key("Escape"), false)).toBeNull();
  });

  it("sends text or attachments, never blank, never during a reply", () => {
    expect(canSend("hi", 0, false)).toBe(true);
    expect(canSend("  \n ", 0, false)).toBe(false);
    expect(canSend("", 1, false)).toBe(true);
    expect(canSend("hi", 0, true)).toBe(false);
  });
});

describe("Composer", () => {
  function setup(replying = false, accepted = true) {
    const onSend = vi.fn(() => Promise.resolve(accepted));
    const onStop = vi.fn();
    render(<Composer replying={replying} onSend={onSend} onStop={onStop} />);
    const box = screen.getByLabelText("Message") as HTMLTextAreaElement;
    return { onSend, onStop, box };
  }

  it("Enter sends the text and empties the box; Shift+Enter does not send", async () => {
    const { onSend, box } = setup();
    fireEvent.input(box, { target: { value: "line one" } });
    fireEvent.keyDown(box, { key: "Enter", shiftKey: true });
    expect(onSend).not.toHaveBeenCalled();
    fireEvent.keyDown(box, { key: "Enter" });
    expect(onSend).toHaveBeenCalledWith("line one", []);
    await waitFor(() => expect(box.value).toBe(""));
  });

  it("the Send button sends; it is disabled while the box is blank", () => {
    const { onSend, box } = setup();
    const send = screen.getByRole("button", { name: "Send" }) as HTMLButtonElement;
    expect(send.disabled).toBe(true);
    fireEvent.input(box, { target: { value: "hello" } });
    expect(send.disabled).toBe(false);
    fireEvent.click(send);
    expect(onSend).toHaveBeenCalledWith("hello", []);
  });

  it("while a reply runs: Stop instead of Send, Esc stops, Enter sends nothing", () => {
    const { onSend, onStop, box } = setup(true);
    expect(screen.queryByRole("button", { name: "Send" })).toBeNull();
    fireEvent.input(box, { target: { value: "next" } });
    fireEvent.keyDown(box, { key: "Enter" });
    expect(onSend).not.toHaveBeenCalled();
    fireEvent.keyDown(box, { key: "Escape" });
    expect(onStop).toHaveBeenCalledTimes(1);
    fireEvent.click(screen.getByRole("button", { name: "Stop" }));
    expect(onStop).toHaveBeenCalledTimes(2);
  });

  it("a refused message comes back into the box", async () => {
    const { onSend, box } = setup(false, false);
    fireEvent.input(box, { target: { value: "keep me" } });
    fireEvent.keyDown(box, { key: "Enter" });
    expect(onSend).toHaveBeenCalled();
    await waitFor(() => expect(box.value).toBe("keep me"));
  });

  it("pasted files become removable chips, and are sent as attachments", async () => {
    const { onSend, box } = setup();
    const doc = new File(["# Notes"], "notes.md", { type: "" });
    fireEvent.paste(box, { clipboardData: { files: [doc], items: [] } });
    const remove = await screen.findByRole("button", { name: "Remove notes.md" });
    expect(screen.getByText("notes.md")).toBeTruthy();
    fireEvent.keyDown(box, { key: "Enter" });
    expect(onSend).toHaveBeenCalledTimes(1);
    const [, attachments] = onSend.mock.calls[0] as unknown as [string, { name: string; dataUrl: string }[]];
    expect(attachments.map((a) => a.name)).toEqual(["notes.md"]);
    expect(attachments[0].dataUrl.startsWith("data:text/markdown;base64,")).toBe(true);
    expect(remove).toBeTruthy();
  });

  it("a file of the wrong kind is refused with a readable message", async () => {
    const { box } = setup();
    fireEvent.paste(box, { clipboardData: { files: [new File(["MZ"], "setup.exe")], items: [] } });
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("setup.exe cannot be attached");
  });

  it("removing a chip removes the attachment", async () => {
    const { box } = setup();
    fireEvent.paste(box, { clipboardData: { files: [new File(["a"], "a.txt")], items: [] } });
    fireEvent.click(await screen.findByRole("button", { name: "Remove a.txt" }));
    expect(screen.queryByText("a.txt")).toBeNull();
  });
});
