import { describe, expect, it } from "vitest";
import type { StoredMessage } from "../../types";
import { branchSpend, displayableImage, editedContent, pendingApprovals, storedError, storedReply, userView } from "./messages";

function message(overrides: Partial<StoredMessage>): StoredMessage {
  return {
    id: "m", object: "conversation.message", parent_id: null, role: "assistant", content: "", parts: [],
    status: "complete", model: "mock-model", usage: null, finish_reason: "stop", error: null, created_at: 0, updated_at: 0,
    ...overrides,
  };
}

describe("stored messages as shown", () => {
  it("a stored reply keeps reasoning, tool cards (with results) and text in order", () => {
    const state = storedReply(
      message({
        parts: [
          { kind: "reasoning", text: "think" },
          { kind: "tool_call", id: "c1", name: "current_time", arguments: "{}", result: { content: "noon", is_error: false, started_at: 1, seconds: 0.5 }, approval: "auto" },
          { kind: "text", text: "It is noon." },
          { kind: "image", url: "/v1/files/file_1" },
        ],
        usage: { input_tokens: 12, output_tokens: 5, response_usd: 0.001, conversation_usd: 0.002, complete: true },
      }),
    );
    expect(state.phase).toBe("done");
    expect(state.segments).toEqual([
      { kind: "reasoning", text: "think", live: false },
      { kind: "tool", id: "c1" },
      { kind: "text", text: "It is noon.", live: 0 },
      { kind: "image", url: "/v1/files/file_1" },
    ]);
    expect(state.tools.c1).toMatchObject({ output: "noon", seconds: 0.5, running: false, isError: false });
    expect(state.usage).toEqual({ input: 12, output: 5 });
  });

  it("a paused reply's pending calls: the stored list when given, else its pending tool calls", () => {
    const parts: StoredMessage["parts"] = [
      { kind: "tool_call", id: "c1", name: "workspace_write", arguments: '{"a":1}', result: null, approval: "pending" },
      { kind: "tool_call", id: "c2", name: "current_time", arguments: "{}", result: { content: "x", is_error: false }, approval: "auto" },
    ];
    expect(pendingApprovals(message({ status: "awaiting_approval", parts }))).toEqual([
      { id: "c1", tool: "workspace_write", arguments: '{"a":1}' },
    ]);
    const stored = [{ id: "c1", tool: "workspace_write", arguments: '{"a":1}', expires_at: 99, expired: true }];
    expect(pendingApprovals(message({ status: "awaiting_approval", parts, pending_approvals: stored }))).toBe(stored);
    expect(storedReply(message({ status: "awaiting_approval", parts })).pending).toHaveLength(1);
    expect(storedReply(message({ status: "complete", parts })).pending).toHaveLength(0);
  });

  it("errors are read as sentences; a complete reply's error is why the agent stopped", () => {
    expect(storedError({ message: "upstream down", code: "upstream_error" })).toEqual({ message: "upstream down", code: "upstream_error" });
    expect(storedError("plain")).toEqual({ message: "plain", code: null });
    expect(storedError(null)).toBeNull();
    const failed = storedReply(message({ status: "failed", error: { message: "boom", code: "x" } }));
    expect(failed.error?.message).toBe("boom");
    const stopped = storedReply(message({ status: "complete", error: { message: "[Reached max iterations (50)]", code: "max_iterations" } }));
    expect(stopped.error).toBeNull();
    expect(stopped.stopped?.message).toBe("[Reached max iterations (50)]");
  });

  it("a user message's text, images and documents", () => {
    const view = userView(
      message({
        role: "user",
        content: "see",
        parts: [
          { kind: "text", text: "see" },
          { kind: "image", url: "data:image/png;base64,AA" },
          { kind: "file", name: "a.pdf", data: "data:application/pdf;base64,BB", media_type: "application/pdf" },
        ],
      }),
    );
    expect(view.text).toBe("see");
    expect(view.images).toEqual([{ url: "data:image/png;base64,AA" }]);
    expect(view.files).toEqual([{ name: "a.pdf", mediaType: "application/pdf", data: "data:application/pdf;base64,BB" }]);
  });

  it("an edit keeps the message's images and documents", () => {
    const original = message({
      role: "user",
      parts: [
        { kind: "text", text: "old" },
        { kind: "image", url: "data:image/png;base64,AA" },
        { kind: "file", name: "a.txt", data: "QUJD", media_type: "text/plain" },
      ],
    });
    expect(editedContent(original, "new")).toEqual([
      { type: "text", text: "new" },
      { type: "image_url", image_url: { url: "data:image/png;base64,AA" } },
      { type: "file", file: { filename: "a.txt", file_data: "data:text/plain;base64,QUJD" } },
    ]);
    expect(editedContent(message({ role: "user", parts: [{ kind: "text", text: "old" }] }), "new")).toBe("new");
  });

  it("only this server's files and image data URLs are loaded", () => {
    expect(displayableImage("/v1/files/file_abc")).toBe(true);
    expect(displayableImage("data:image/png;base64,AAAA")).toBe(true);
    expect(displayableImage("https://tracker.example/pixel.gif")).toBe(false);
    expect(displayableImage("javascript:alert(1)")).toBe(false);
    expect(displayableImage("data:image/svg+xml;base64,AAAA")).toBe(false);
    expect(displayableImage("/v1/files/../session")).toBe(false);
  });

  it("the branch's cost is the sum of its replies', a lower bound when one had no price", () => {
    const replies = [
      message({ usage: { response_usd: 0.25, complete: true } }),
      message({ role: "user" }),
      message({ usage: { response_usd: 0.5, complete: false } }),
    ];
    expect(branchSpend(replies)).toEqual({ usd: 0.75, complete: false });
    expect(branchSpend([])).toEqual({ usd: 0, complete: true });
  });
});
