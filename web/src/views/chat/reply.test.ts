import { describe, expect, it } from "vitest";
import {
  applyChunks,
  cancel,
  codePoints,
  dropLastCodePoints,
  emptyReply,
  fail,
  finish,
  isRunning,
  reduce,
  resume,
  type Chunk,
  type ReplyState,
} from "./reply";

const ids = { conversation_id: "conv_1", message_id: "msg_9" };

function chunk(delta: Chunk["choices"][number]["delta"], extra: Partial<Chunk> = {}, finish: string | null = null): Chunk {
  return {
    id: "chatcmpl-msg_9",
    model: "mock-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
    parley: ids,
    ...extra,
  };
}

function progress(parley: Partial<NonNullable<Chunk["parley"]>>): Chunk {
  return { id: "c", model: "mock-model", choices: [{ index: 0, delta: {}, finish_reason: null }], parley: { ...ids, ...parley } };
}

function run(...chunks: Chunk[]): ReplyState {
  return chunks.reduce(reduce, emptyReply());
}

describe("reply state machine", () => {
  it("starts waiting and streams text into one segment", () => {
    expect(emptyReply().phase).toBe("waiting");
    const state = run(chunk({ role: "assistant", content: "" }), chunk({ content: "Hel" }), chunk({ content: "lo" }));
    expect(state.phase).toBe("streaming");
    expect(state.conversationId).toBe("conv_1");
    expect(state.messageId).toBe("msg_9");
    expect(state.model).toBe("mock-model");
    expect(state.segments).toEqual([{ kind: "text", text: "Hello", live: 5 }]);
    expect(state.streamedChars).toBe(5);
  });

  it("keeps reasoning, tool cards and text in the order they came", () => {
    const state = run(
      chunk({ reasoning_content: "Let me " }),
      chunk({ reasoning_content: "check." }),
      progress({ tool: { phase: "start", id: "call_1", name: "current_time", arguments: "{}" } }),
      progress({
        tool: { phase: "end", id: "call_1", name: "current_time", arguments: "{}", tool_output: "12:00", is_error: false, seconds: 0.25 },
      }),
      chunk({ content: "\n\nIt is noon." }),
    );
    expect(state.segments.map((s) => s.kind)).toEqual(["reasoning", "tool", "text"]);
    expect(state.segments[0]).toMatchObject({ text: "Let me check." });
    expect(state.tools.call_1).toEqual({
      id: "call_1",
      name: "current_time",
      arguments: "{}",
      output: "12:00",
      isError: false,
      seconds: 0.25,
      running: false,
    });
  });

  it("shows a tool as running between its start and end, and an error in red", () => {
    const started = run(progress({ tool: { phase: "start", id: "c1", name: "web_fetch", arguments: '{"url":"x"}' } }));
    expect(started.tools.c1.running).toBe(true);
    expect(started.tools.c1.output).toBeNull();
    const ended = reduce(
      started,
      progress({ tool: { phase: "end", id: "c1", name: "web_fetch", arguments: '{"url":"x"}', tool_output: "refused", is_error: true, seconds: 1 } }),
    );
    expect(ended.tools.c1).toMatchObject({ running: false, isError: true, output: "refused", seconds: 1 });
    expect(ended.segments).toEqual([{ kind: "tool", id: "c1" }]);
  });

  it("takes the last chunk's pending approvals, citations, notes, cost and stop reason, then usage", () => {
    const pending = [{ id: "call_7", tool: "workspace_write", arguments: '{"path":"a"}' }];
    const citation = {
      rank: 1, source: "context", chunk_id: 1, document_id: "doc_1", knowledge_base_id: "kb_1",
      title: "leave.pdf", score: 0.03, excerpt: "...", page: 4, section: "Leave",
    };
    const state = run(
      chunk({ content: "Waiting" }),
      chunk(
        {},
        {
          parley: {
            ...ids,
            pending_approvals: pending,
            citations: [citation],
            notes: ["the image was left unread"],
            cost: { response_usd: 0.002, conversation_usd: 0.01, complete: true },
            stopped: { code: "max_iterations", message: "[Reached max iterations (50)]" },
          },
        },
        "stop",
      ),
      { id: "c", model: "mock-model", choices: [], usage: { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29 }, parley: ids },
    );
    expect(state.pending).toEqual(pending);
    expect(state.citations).toEqual([citation]);
    expect(state.notes).toEqual(["the image was left unread"]);
    expect(state.cost?.response_usd).toBe(0.002);
    expect(state.stopped?.code).toBe("max_iterations");
    expect(state.finishReason).toBe("stop");
    expect(state.usage).toEqual({ input: 20, output: 9 });
    expect(finish(state).phase).toBe("done");
  });

  it("a restart with clear drops this attempt's reasoning and the text past keep_content_chars", () => {
    const before = run(
      chunk({ content: "Step one. 👋" }),
      progress({ tool: { phase: "start", id: "t", name: "current_time", arguments: "{}" } }),
      progress({ tool: { phase: "end", id: "t", name: "current_time", arguments: "{}", tool_output: "1", is_error: false, seconds: 0 } }),
      chunk({ reasoning_content: "hmm" }),
      chunk({ content: "\n\nHalf an ans" }),
    );
    // "Step one. 👋" is 11 code points (12 UTF-16 units): the server counts code points
    expect(before.streamedChars).toBe(11 + 13);
    const after = reduce(before, progress({ restart: { reason: "upstream 503", clear: true, keep_content_chars: 11 } }));
    expect(after.segments).toEqual([
      { kind: "text", text: "Step one. 👋", live: 11 },
      { kind: "tool", id: "t" },
    ]);
    expect(after.streamedChars).toBe(11);
    const again = reduce(after, chunk({ content: "\n\nThe answer." }));
    expect(again.segments[2]).toEqual({ kind: "text", text: "\n\nThe answer.", live: 13 });
    expect(again.tools.t.output).toBe("1");
  });

  it("a restart with clear and nothing kept empties the answer; without clear nothing changes", () => {
    const shown = run(chunk({ reasoning_content: "r" }), chunk({ content: "partial" }));
    const quiet = reduce(shown, progress({ restart: { reason: "retry", clear: false, keep_content_chars: 0 } }));
    expect(quiet.segments).toEqual(shown.segments);
    const cleared = reduce(shown, progress({ restart: { reason: "rewritten", clear: true, keep_content_chars: 0 } }));
    expect(cleared.segments).toEqual([]);
    expect(cleared.streamedChars).toBe(0);
  });

  it("an error keeps what was shown and says why; running tools stop", () => {
    const state = run(chunk({ content: "So far" }), progress({ tool: { phase: "start", id: "x", name: "web_fetch", arguments: "{}" } }));
    const failed = fail(state, { message: "the upstream failed", code: "upstream_error" });
    expect(failed.phase).toBe("error");
    expect(failed.error).toEqual({ message: "the upstream failed", code: "upstream_error" });
    expect(failed.segments[0]).toMatchObject({ text: "So far" });
    expect(failed.tools.x.running).toBe(false);
    expect(isRunning(failed)).toBe(false);
    expect(finish(failed).phase).toBe("error");
  });

  it("cancel marks a running reply stopped, not a finished one", () => {
    const running = run(chunk({ content: "abc" }));
    expect(cancel(running).phase).toBe("cancelled");
    expect(cancel(finish(running)).phase).toBe("done");
  });

  it("applies a frame's chunks at once without touching the previous state", () => {
    const start = run(chunk({ content: "a" }));
    const next = applyChunks(start, [chunk({ content: "b" }), chunk({ content: "c" })]);
    expect(next.segments).toEqual([{ kind: "text", text: "abc", live: 3 }]);
    expect(start.segments).toEqual([{ kind: "text", text: "a", live: 1 }]);
    expect(applyChunks(start, [])).toBe(start);
  });

  it("resume carries a paused reply on: decisions shown, new output appended, old text kept on restart", () => {
    const paused: ReplyState = {
      ...emptyReply(),
      phase: "done",
      segments: [
        { kind: "text", text: "I will write the file.", live: 0 },
        { kind: "tool", id: "call_7" },
      ],
      tools: {
        call_7: { id: "call_7", name: "workspace_write", arguments: "{}", output: null, isError: false, seconds: null, running: false, approval: "pending" },
      },
      pending: [{ id: "call_7", tool: "workspace_write", arguments: "{}" }],
    };
    const resumed = resume(paused, { call_7: { approval: "approved" } });
    expect(resumed.phase).toBe("waiting");
    expect(resumed.pending).toEqual([]);
    expect(resumed.tools.call_7.approval).toBe("approved");
    const ran = applyChunks(resumed, [
      progress({ tool: { phase: "start", id: "call_7", name: "workspace_write", arguments: "{}" } }),
      progress({ tool: { phase: "end", id: "call_7", name: "workspace_write", arguments: "{}", tool_output: "ok", is_error: false, seconds: 0.1 } }),
      chunk({ content: "Done." }),
    ]);
    expect(ran.segments.map((s) => s.kind)).toEqual(["text", "tool", "text"]);
    expect(ran.tools.call_7).toMatchObject({ output: "ok", approval: "approved", running: false });
    const restarted = reduce(ran, progress({ restart: { reason: "retry", clear: true, keep_content_chars: 0 } }));
    expect(restarted.segments).toEqual([
      { kind: "text", text: "I will write the file.", live: 0 },
      { kind: "tool", id: "call_7" },
    ]);
  });

  it("counts and cuts code points as the server does", () => {
    expect(codePoints("a👋b")).toBe(3);
    expect("a👋b".length).toBe(4);
    expect(dropLastCodePoints("a👋b", 2)).toBe("a");
    expect(dropLastCodePoints("abc", 0)).toBe("abc");
    expect(dropLastCodePoints("abc", 5)).toBe("");
  });
});
