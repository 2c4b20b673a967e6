// The state of one chat screen and everything it does: open a conversation, send, redo,
// edit, decide on approvals, stop, move between versions, delete a version, fork. Every
// change ends by reading the conversation again, so what the page shows is what a reload
// shows. The reply being written lives in its own signal, which only the live reply reads:
// the rest of the page does not re-render while tokens arrive.
import { batch, signal } from "@preact/signals";
import { ApiError } from "../../api";
import { errorText } from "../../components/ErrorNote";
import { touch } from "../../conversations";
import { t } from "../../i18n";
import { navigate } from "../../router";
import type { ConversationDetail, StoredMessage } from "../../types";
import { messageContent, type Attachment } from "./attachments";
import * as chat from "./chatApi";
import type { Chunks, Decision, TurnOptions } from "./chatApi";
import type { Placement, UserDraft } from "./items";
import { editedContent, storedReply } from "./messages";
import { loadPicks, savePicks } from "./prefs";
import { emptyReply, resume, type ApprovalState, type ReplyState } from "./reply";
import { ReplyRun, type RunResult } from "./runner";

/** Re-reads after a reply, for the title and suggestions written after it ended. */
const FOLLOW_UPS_MS = [1500, 4000, 8000];
/** A reply being written elsewhere (another tab, or before this page opened) is watched. */
const WATCH_MS = 2000;
/** Follow-up re-reads only for conversations this size or smaller (each reads it all). */
const FOLLOW_UP_MAX_MESSAGES = 400;

export class ChatController {
  readonly detail = signal<ConversationDetail | null>(null);
  readonly loading = signal(false);
  readonly loadError = signal<unknown>(null);
  readonly placement = signal<Placement | null>(null);
  readonly reply = signal<ReplyState | null>(null);
  /** A reply of this page is being read (the page shows Stop). */
  readonly running = signal(false);
  readonly error = signal<unknown>(null);
  readonly announcement = signal("");
  readonly picks = signal<TurnOptions>({});
  /** `parley.notes` of replies this page saw (the stored message does not keep them). */
  readonly notes = signal<Record<string, string[]>>({});

  id: string | null = null;
  private run: ReplyRun | null = null;
  private opened = 0;
  private timers: ReturnType<typeof setTimeout>[] = [];
  private reading: AbortController | null = null;

  /** Show conversation `id` (null: a new chat). The id a reply of this page just named is
   * already shown: nothing is read again. */
  open(id: string | null): void {
    if (id !== null && id === this.id) return;
    this.opened++;
    this.run?.detach();
    this.run = null;
    this.clearTimers();
    this.id = id;
    batch(() => {
      this.running.value = false;
      this.detail.value = null;
      this.loadError.value = null;
      this.error.value = null;
      this.placement.value = null;
      this.reply.value = null;
      this.announcement.value = "";
      this.picks.value = loadPicks(id);
    });
    if (id) void this.reload();
  }

  dispose(): void {
    this.opened++;
    this.run?.detach();
    this.reading?.abort();
    this.clearTimers();
  }

  /** A reply of this conversation is being written, by this page or elsewhere (another
   * tab, or one running since before this page opened it). */
  get replying(): boolean {
    return this.running.value || Boolean(this.detail.value?.messages.some((m) => m.status === "streaming"));
  }

  setPicks(picks: TurnOptions): void {
    this.picks.value = picks;
    savePicks(this.id, picks);
  }

  /** Read the conversation again; `touched`: it changed (a reply), so the sidebar puts
   * it first with its newest title. */
  async reload(touched = false): Promise<void> {
    const id = this.id;
    if (!id) return;
    const mine = this.opened;
    this.reading?.abort();
    const reading = (this.reading = new AbortController());
    this.loading.value = true;
    try {
      const detail = await chat.getConversation(id, reading.signal);
      if (mine !== this.opened || this.run) return;
      this.show(detail, touched);
    } catch (error) {
      if (mine !== this.opened || reading.signal.aborted) return;
      if (this.detail.value) this.error.value = error;
      else this.loadError.value = error;
    } finally {
      if (mine === this.opened && this.reading === reading) this.loading.value = false;
    }
  }

  private show(detail: ConversationDetail, touched: boolean): void {
    batch(() => {
      this.detail.value = detail;
      this.loadError.value = null;
      this.placement.value = null;
      this.reply.value = null;
    });
    if (touched) touch({ id: detail.id, title: detail.title, updated_at: detail.updated_at });
    if (detail.messages.some((m) => m.status === "streaming")) this.later(WATCH_MS, () => void this.reload(true));
  }

  // --- replies ---------------------------------------------------------------------------

  /** Send a message. Resolves false when it was refused before anything was stored (the
   * composer then gives the text and attachments back). */
  async send(text: string, attachments: Attachment[]): Promise<boolean> {
    if (this.running.value) return false;
    const content = messageContent(text, attachments);
    const id = this.id;
    const picks = this.picks.value;
    const user: UserDraft = { text, attachments };
    const result = await this.start({ kind: "append", user }, emptyReply(), (signal) =>
      id ? chat.sendMessage(id, content, picks, signal) : chat.startConversation(content, picks, signal),
    );
    return result?.outcome !== "refused";
  }

  /** A new version of reply `messageId` (Regenerate, Retry). */
  async regenerate(messageId: string): Promise<void> {
    const id = this.id;
    if (!id || this.running.value) return;
    const picks = this.picks.value;
    await this.start({ kind: "replace", messageId }, emptyReply(), (signal) =>
      chat.regenerate(id, messageId, picks, signal),
    );
  }

  /** A new version of user message `message` with `text`, and its reply. */
  async edit(message: StoredMessage, text: string): Promise<boolean> {
    const id = this.id;
    if (!id || this.running.value) return false;
    const content = editedContent(message, text);
    const picks = this.picks.value;
    const user: UserDraft = { text, attachments: [] };
    const result = await this.start({ kind: "edit", messageId: message.id, user }, emptyReply(), (signal) =>
      chat.edit(id, message.id, content, picks, signal),
    );
    return result?.outcome !== "refused";
  }

  /** Decisions on every call paused reply `message` waits on: the reply resumes in place. */
  async decide(message: StoredMessage, decisions: Decision[]): Promise<boolean> {
    const id = this.id;
    if (!id || this.running.value) return false;
    const decided: Record<string, { approval: ApprovalState; reason?: string | null }> = {};
    for (const d of decisions) decided[d.tool_call_id] = { approval: STATE_OF[d.decision], reason: d.reason ?? null };
    const seed = resume(storedReply(message), decided);
    const result = await this.start({ kind: "replace", messageId: message.id }, seed, (signal) =>
      chat.decide(id, decisions, signal),
    );
    return result?.outcome !== "refused";
  }

  /** Stop the reply being written (Stop, Esc): it is saved as interrupted. */
  stop(): void {
    if (this.run) {
      this.run.stop();
      return;
    }
    const id = this.id;
    if (id && this.detail.value?.messages.some((m) => m.status === "streaming")) {
      chat.cancelReply(id).then(
        () => this.reload(true),
        (error: unknown) => {
          this.error.value = error;
        },
      );
    }
  }

  private async start(placement: Placement, seed: ReplyState, open: (signal: AbortSignal) => Promise<Chunks>): Promise<RunResult | null> {
    const mine = this.opened;
    this.clearTimers();
    this.reading?.abort();
    const run = new ReplyRun(
      seed,
      {
        onState: (state) => {
          if (mine === this.opened) this.reply.value = state;
        },
        onConversation: (id) => {
          if (mine === this.opened) this.named(id);
        },
        cancel: (id) => chat.cancelReply(id),
      },
      this.id,
    );
    this.run = run;
    batch(() => {
      this.running.value = true;
      this.error.value = null;
      this.announcement.value = "";
      this.placement.value = placement;
      this.reply.value = seed;
    });
    const result = await run.run(open);
    if (mine !== this.opened) return result;
    this.run = null;
    await this.ended(result);
    if (mine === this.opened) this.running.value = false;
    return result;
  }

  /** A new chat's first chunk names its conversation: the URL and the sidebar follow. */
  private named(id: string): void {
    if (this.id) return;
    this.id = id;
    savePicks(id, this.picks.value);
    const draft = this.placement.value?.kind === "append" ? this.placement.value.user : null;
    touch({ id, title: draft?.text.split("\n")[0].slice(0, 200) || null });
    navigate({ name: "chat", id }, { replace: true });
  }

  private async ended(result: RunResult): Promise<void> {
    const { outcome, state } = result;
    if (state.messageId && state.notes.length) {
      this.notes.value = { ...this.notes.value, [state.messageId]: state.notes };
    }
    this.announcement.value = announce(result);
    if (outcome === "refused") {
      batch(() => {
        this.placement.value = null;
        this.reply.value = null;
        this.error.value = result.error;
      });
      return;
    }
    if (outcome === "error" && !this.id) this.error.value = result.error;
    await this.reload(true);
    if (outcome === "done" && !state.pending.length) this.followUp();
  }

  /** Titles and suggestions are written after the reply ends: read again a few times
   * until they are there (the API has no event for it). */
  private followUp(): void {
    const before = this.detail.value;
    if (!before || before.messages.length > FOLLOW_UP_MAX_MESSAGES) return;
    const title = before.title;
    const fresh = before.messages.length <= 2;
    const waiting = (d: ConversationDetail) => !d.suggestions.length || (fresh && d.title === title);
    if (!waiting(before)) return;
    const mine = this.opened;
    const step = (i: number) => {
      if (i >= FOLLOW_UPS_MS.length) return;
      this.later(FOLLOW_UPS_MS[i] - (FOLLOW_UPS_MS[i - 1] ?? 0), async () => {
        if (mine !== this.opened || this.running.value) return;
        await this.reload(true);
        const now = this.detail.value;
        if (now && waiting(now)) step(i + 1);
      });
    };
    step(0);
  }

  // --- versions --------------------------------------------------------------------------

  async select(messageId: string): Promise<void> {
    await this.change(() => chat.selectVersion(this.id!, messageId));
  }

  async deleteVersion(messageId: string): Promise<void> {
    await this.change(() => chat.deleteVersion(this.id!, messageId));
  }

  async fork(messageId: string): Promise<void> {
    const id = this.id;
    if (!id || this.running.value) return;
    try {
      const copy = await chat.fork(id, messageId);
      touch({ id: copy.id, title: copy.title, created_at: copy.created_at, updated_at: copy.updated_at });
      savePicks(copy.id, this.picks.value);
      navigate({ name: "chat", id: copy.id });
    } catch (error) {
      this.error.value = error;
    }
  }

  /** A change answered with the conversation as GET shows it. */
  private async change(request: () => Promise<ConversationDetail>): Promise<void> {
    if (!this.id || this.running.value) return;
    const mine = this.opened;
    this.error.value = null;
    try {
      const detail = await request();
      if (mine === this.opened) this.show(detail, false);
    } catch (error) {
      if (mine !== this.opened) return;
      this.error.value = error;
      await this.reload();
    }
  }

  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.timers = this.timers.filter((t) => t !== timer);
      run();
    }, ms);
    this.timers.push(timer);
  }

  private clearTimers(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers = [];
  }
}

const STATE_OF: Record<Decision["decision"], ApprovalState> = {
  approve: "approved",
  deny: "denied",
  answer: "answered",
};

function announce(result: RunResult): string {
  switch (result.outcome) {
    case "done":
      return result.state.pending.length ? t("chat.announce.awaiting") : t("chat.announce.finished");
    case "cancelled":
      return t("chat.announce.stopped");
    default:
      return t("chat.announce.failed", { message: errorText(result.error) });
  }
}

export function isNotFound(error: unknown): boolean {
  return error instanceof ApiError && error.status === 404;
}
