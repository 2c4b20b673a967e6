// One consumer for every call that answers like chat completions (send, regenerate, edit,
// approvals): it reads the chunk stream, folds the chunks into the reply state at most
// once per animation frame (a reply at 200 tokens/s costs one small update a frame, not
// one per token), and stops on request: the conversation's reply is cancelled on the
// server (`POST .../cancel`), then reading ends.
import { ApiError } from "../../api";
import { errorText } from "../../components/ErrorNote";
import { applyChunks, cancel, fail, finish, type Chunk, type ReplyState } from "./reply";

export type Outcome = "done" | "error" | "cancelled" | "refused";

export interface RunResult {
  outcome: Outcome;
  state: ReplyState;
  /** The failure, when the outcome is "error" or "refused". */
  error: unknown;
}

export interface RunHooks {
  /** The reply as it should be shown now (at most once a frame). */
  onState(state: ReplyState): void;
  /** The first chunk names the conversation (a new chat learns its id here). */
  onConversation?(id: string): void;
  /** Stop the conversation's reply on the server. */
  cancel?(conversationId: string): Promise<unknown>;
}

export type Scheduler = (run: () => void) => void;

/** The next animation frame, or a timer when the page is hidden (no frames then). */
export const nextFrame: Scheduler = (run) => {
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    cancelAnimationFrame(frame);
    clearTimeout(timer);
    run();
  };
  const frame = requestAnimationFrame(once);
  const timer = setTimeout(once, 250);
};

export type Opener = (signal: AbortSignal) => Promise<AsyncIterable<Chunk>>;

export class ReplyRun {
  private state: ReplyState;
  private queue: Chunk[] = [];
  private scheduled = false;
  private stopping = false;
  private conversationId: string | null;
  private cancelled: Promise<unknown> | null = null;
  private readonly abort = new AbortController();

  constructor(
    initial: ReplyState,
    private readonly hooks: RunHooks,
    conversationId: string | null,
    private readonly schedule: Scheduler = nextFrame,
  ) {
    this.state = initial;
    this.conversationId = conversationId;
  }

  get current(): ReplyState {
    return this.state;
  }

  get stopped(): boolean {
    return this.stopping;
  }

  /** Read the stream `open` starts to its end. */
  async run(open: Opener): Promise<RunResult> {
    try {
      const chunks = await open(this.abort.signal);
      for await (const chunk of chunks) {
        this.named(chunk);
        if (this.stopping) {
          if (this.cancelled) break;
          continue; // stopped before the conversation was named: read on until it is
        }
        this.queue.push(chunk);
        this.request();
      }
      return await this.end(null);
    } catch (error) {
      return await this.end(error);
    }
  }

  /** Stop: shown at once as stopped; the server is told as soon as the conversation is
   * known (a new chat learns it from the first chunk), and reading ends. */
  stop(): void {
    if (this.stopping) return;
    this.flush();
    this.stopping = true;
    this.state = cancel(this.state);
    this.hooks.onState(this.state);
    if (this.conversationId) this.cancelOnServer(this.conversationId);
  }

  /** Stop reading without cancelling the reply (the page moved elsewhere: a reply in a
   * stored conversation finishes on the server and is there when the person returns). */
  detach(): void {
    this.stopping = true;
    this.cancelled ??= Promise.resolve();
    this.abort.abort();
  }

  private named(chunk: Chunk): void {
    const id = chunk.parley?.conversation_id;
    if (!id || this.conversationId === id) return;
    const first = this.conversationId === null;
    this.conversationId = id;
    if (first) this.hooks.onConversation?.(id);
    if (this.stopping && !this.cancelled) this.cancelOnServer(id);
  }

  private cancelOnServer(id: string): void {
    const request = this.hooks.cancel?.(id) ?? Promise.resolve();
    this.cancelled = request.catch(() => undefined);
    this.abort.abort();
  }

  private request(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    this.schedule(() => {
      this.scheduled = false;
      if (!this.stopping) this.flush();
    });
  }

  private flush(): void {
    if (!this.queue.length) return;
    const chunks = this.queue;
    this.queue = [];
    this.state = applyChunks(this.state, chunks);
    this.hooks.onState(this.state);
  }

  private async end(error: unknown): Promise<RunResult> {
    if (this.stopping) {
      await this.cancelled;
      return { outcome: "cancelled", state: this.state, error: null };
    }
    this.flush();
    if (error === null) {
      this.state = finish(this.state);
      this.hooks.onState(this.state);
      return { outcome: "done", state: this.state, error: null };
    }
    const code = error instanceof ApiError ? error.code : null;
    if (code === "cancelled") {
      this.state = cancel(this.state);
      this.hooks.onState(this.state);
      return { outcome: "cancelled", state: this.state, error: null };
    }
    const refused = error instanceof ApiError && error.status > 0;
    this.state = fail(this.state, { message: errorText(error), code });
    this.hooks.onState(this.state);
    return { outcome: refused ? "refused" : "error", state: this.state, error };
  }
}
