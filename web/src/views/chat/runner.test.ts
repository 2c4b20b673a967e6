import { describe, expect, it, vi } from "vitest";
import { ApiError } from "../../api";
import { emptyReply, type Chunk, type ReplyState } from "./reply";
import { ReplyRun, type Scheduler } from "./runner";

function text(content: string, conversation = "conv_1"): Chunk {
  return {
    id: "c",
    model: "m",
    choices: [{ index: 0, delta: { content }, finish_reason: null }],
    parley: { conversation_id: conversation, message_id: "msg_1" },
  };
}

/** Frames run when the test says so. */
function manualFrames(): { schedule: Scheduler; tick: () => void; pending: () => number } {
  let queue: (() => void)[] = [];
  return {
    schedule: (run) => queue.push(run),
    tick: () => {
      const now = queue;
      queue = [];
      now.forEach((run) => run());
    },
    pending: () => queue.length,
  };
}

/** A stream the test feeds chunk by chunk. */
function feed() {
  const waiting: ((r: IteratorResult<Chunk>) => void)[] = [];
  const ready: IteratorResult<Chunk>[] = [];
  let signal: AbortSignal | null = null;
  const iterable: AsyncIterable<Chunk> = {
    [Symbol.asyncIterator]: () => ({
      next: () =>
        new Promise<IteratorResult<Chunk>>((resolve, reject) => {
          if (ready.length) return resolve(ready.shift()!);
          waiting.push(resolve);
          signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
        }),
    }),
  };
  const push = (r: IteratorResult<Chunk>) => {
    const next = waiting.shift();
    if (next) next(r);
    else ready.push(r);
  };
  return {
    open: async (s: AbortSignal) => {
      signal = s;
      return iterable;
    },
    send: (chunk: Chunk) => push({ value: chunk, done: false }),
    end: () => push({ value: undefined, done: true }),
  };
}

const settle = () => new Promise((r) => setTimeout(r, 0));

describe("ReplyRun", () => {
  it("folds every chunk of a frame into one update", async () => {
    const frames = manualFrames();
    const states: ReplyState[] = [];
    const stream = feed();
    const run = new ReplyRun(emptyReply(), { onState: (s) => states.push(s) }, "conv_1", frames.schedule);
    const done = run.run(stream.open);
    await settle();
    for (const piece of ["a", "b", "c", "d"]) stream.send(text(piece));
    await settle();
    expect(states).toHaveLength(0);
    expect(frames.pending()).toBe(1);
    frames.tick();
    expect(states).toHaveLength(1);
    expect(states[0].segments).toEqual([{ kind: "text", text: "abcd", live: 4 }]);
    stream.send(text("e"));
    stream.end();
    const result = await done;
    expect(result.outcome).toBe("done");
    expect(result.state.phase).toBe("done");
    expect(states[states.length - 1].segments[0]).toMatchObject({ text: "abcde" });
  });

  it("names a new chat's conversation from its first chunk, once", async () => {
    const named = vi.fn();
    const stream = feed();
    const run = new ReplyRun(emptyReply(), { onState: () => {}, onConversation: named }, null, manualFrames().schedule);
    const done = run.run(stream.open);
    await settle();
    stream.send(text("a", "conv_new"));
    stream.send(text("b", "conv_new"));
    stream.end();
    await done;
    expect(named).toHaveBeenCalledTimes(1);
    expect(named).toHaveBeenCalledWith("conv_new");
  });

  it("stop cancels the conversation's reply on the server and stops reading", async () => {
    const cancel = vi.fn(() => Promise.resolve({}));
    const states: ReplyState[] = [];
    const stream = feed();
    const frames = manualFrames();
    const run = new ReplyRun(emptyReply(), { onState: (s) => states.push(s), cancel }, "conv_1", frames.schedule);
    const done = run.run(stream.open);
    await settle();
    stream.send(text("partial"));
    await settle();
    run.stop();
    expect(cancel).toHaveBeenCalledWith("conv_1");
    const result = await done;
    expect(result.outcome).toBe("cancelled");
    expect(result.state.phase).toBe("cancelled");
    expect(result.state.segments[0]).toMatchObject({ text: "partial" });
    expect(states[states.length - 1].phase).toBe("cancelled");
  });

  it("stopped before the conversation is named, it cancels as soon as the first chunk names it", async () => {
    const cancel = vi.fn(() => Promise.resolve({}));
    const states: ReplyState[] = [];
    const stream = feed();
    const run = new ReplyRun(emptyReply(), { onState: (s) => states.push(s), cancel }, null, manualFrames().schedule);
    const done = run.run(stream.open);
    await settle();
    run.stop();
    expect(cancel).not.toHaveBeenCalled();
    expect(states[states.length - 1].phase).toBe("cancelled");
    stream.send(text("first", "conv_new"));
    const result = await done;
    expect(cancel).toHaveBeenCalledWith("conv_new");
    expect(result.outcome).toBe("cancelled");
    expect(result.state.segments).toEqual([]);
  });

  it("an HTTP error before the reply began is 'refused'; an error event mid-stream is 'error'", async () => {
    const refused = new ReplyRun(emptyReply(), { onState: () => {} }, "c", manualFrames().schedule);
    const first = await refused.run(() => Promise.reject(new ApiError("model 'x' not found", 404, "model_not_found")));
    expect(first.outcome).toBe("refused");
    expect(first.state.error?.message).toBe("model 'x' not found");

    async function* failing(): AsyncGenerator<Chunk> {
      yield text("half");
      throw new ApiError("the upstream stopped", 0, "upstream_error");
    }
    const broken = new ReplyRun(emptyReply(), { onState: () => {} }, "c", manualFrames().schedule);
    const second = await broken.run(async () => failing());
    expect(second.outcome).toBe("error");
    expect(second.state.phase).toBe("error");
    expect(second.state.error).toEqual({ message: "the upstream stopped", code: "upstream_error" });
    expect(second.state.segments[0]).toMatchObject({ text: "half" });
  });

  it("a reply cancelled elsewhere (error code cancelled) ends as cancelled", async () => {
    async function* cancelled(): AsyncGenerator<Chunk> {
      yield text("x");
      throw new ApiError("cancelled", 0, "cancelled");
    }
    const run = new ReplyRun(emptyReply(), { onState: () => {} }, "c", manualFrames().schedule);
    expect((await run.run(async () => cancelled())).outcome).toBe("cancelled");
  });

  it("detach stops reading without cancelling the reply", async () => {
    const cancel = vi.fn(() => Promise.resolve({}));
    const stream = feed();
    const run = new ReplyRun(emptyReply(), { onState: () => {}, cancel }, "conv_1", manualFrames().schedule);
    const done = run.run(stream.open);
    await settle();
    run.detach();
    expect((await done).outcome).toBe("cancelled");
    expect(cancel).not.toHaveBeenCalled();
  });
});
