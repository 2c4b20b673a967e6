import { describe, expect, it } from "vitest";
import type { StoredMessage } from "../../types";
import { listItems } from "./items";

function message(id: string, role: StoredMessage["role"]): StoredMessage {
  return {
    id, object: "conversation.message", parent_id: null, role, content: id, parts: [{ kind: "text", text: id }],
    status: "complete", model: null, usage: null, finish_reason: null, error: null, created_at: 0, updated_at: 0,
  };
}

const branch = [message("u1", "user"), message("a1", "assistant"), message("u2", "user"), message("a2", "assistant")];
const keys = (items: ReturnType<typeof listItems>) => items.map((i) => i.key);

describe("the items of the message list", () => {
  it("is the stored branch when no reply runs (system messages left out)", () => {
    expect(keys(listItems([message("s", "system"), ...branch], null))).toEqual(["u1", "a1", "u2", "a2"]);
  });

  it("a new message and its reply go after the branch", () => {
    const user = { text: "next", attachments: [] };
    expect(keys(listItems(branch, { kind: "append", user }))).toEqual(["u1", "a1", "u2", "a2", "draft", "live"]);
    expect(keys(listItems([], { kind: "append", user: null }))).toEqual(["live"]);
  });

  it("a reply redone or resumed takes its message's place, what follows stays", () => {
    expect(keys(listItems(branch, { kind: "replace", messageId: "a1" }))).toEqual(["u1", "live", "u2", "a2"]);
    expect(keys(listItems(branch, { kind: "replace", messageId: "gone" }))).toEqual(["u1", "a1", "u2", "a2", "live"]);
  });

  it("an edited message ends the branch there: its new version, then the reply", () => {
    const user = { text: "edited", attachments: [] };
    expect(keys(listItems(branch, { kind: "edit", messageId: "u2", user }))).toEqual(["u1", "a1", "draft", "live"]);
  });
});
