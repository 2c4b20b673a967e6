// One message of the conversation: a person's (text, images, documents; Edit), a reply
// (ReplyBody; Regenerate, Retry, approvals), the one being written (LiveReply), and the
// actions every stored message has (versions, Copy, Fork, Delete version).
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { Confirm } from "../../components/Confirm";
import { t } from "../../i18n";
import type { StoredMessage } from "../../types";
import { Approvals } from "./Approvals";
import type { Attachment } from "./attachments";
import type { Decision } from "./chatApi";
import { copyText } from "../../clipboard";
import type { ChatController } from "./controller";
import { count, spend } from "./format";
import type { UserDraft } from "./items";
import { displayableImage, messageSpend, needsRetry, storedReply, userView, type FileRef, type ImageRef } from "./messages";
import { Icon, type IconName } from "../../components/icons";
import { pure } from "./pure";
import { isRunning, type ReplyState } from "./reply";
import { ReplyBody } from "./ReplyBody";
import { VersionNav } from "./VersionNav";

/** What a message can ask the chat to do. One object for the whole list (stable). */
export interface MessageActions {
  regenerate(messageId: string): void;
  edit(message: StoredMessage, text: string): Promise<boolean>;
  select(messageId: string): void;
  remove(messageId: string): void;
  fork(messageId: string): void;
  decide(message: StoredMessage, decisions: Decision[]): Promise<boolean>;
}

function citePrefix(messageId: string | null): string {
  return `cite-${messageId ?? "live"}`;
}

// --- attachments of a person's message ---------------------------------------------------

function Attachments({ images, files }: { images: ImageRef[]; files: FileRef[] }) {
  if (!images.length && !files.length) return null;
  return (
    <div class="msg-attachments">
      {images.map((image, i) =>
        displayableImage(image.url) ? (
          <a key={`i${i}`} class="thumb" href={image.url} target="_blank" rel="noopener noreferrer">
            <img src={image.url} alt={t("chat.attachedImage", { n: i + 1 })} loading="lazy" />
          </a>
        ) : (
          <span key={`i${i}`} class="file-chip">
            {t("chat.attachedImage", { n: i + 1 })}
          </span>
        ),
      )}
      {files.map((file, i) => (
        <span key={`f${i}`} class="file-chip" title={file.mediaType ?? undefined}>
          <Icon name="file" /> {file.name}
        </span>
      ))}
    </div>
  );
}

function draftRefs(attachments: Attachment[]): { images: ImageRef[]; files: FileRef[] } {
  return {
    images: attachments.filter((a) => a.kind === "image").map((a) => ({ url: a.dataUrl })),
    files: attachments.filter((a) => a.kind === "file").map((a) => ({ name: a.name, mediaType: a.mediaType, data: "" })),
  };
}

// --- actions -------------------------------------------------------------------------------

function CopyButton({ text }: { text: string }) {
  const [copied, setCopied] = useState(false);
  async function copy() {
    if (await copyText(text)) {
      setCopied(true);
      setTimeout(() => setCopied(false), 1500);
    }
  }
  return (
    <button type="button" class="icon" aria-label={t("common.copy")} title={t("common.copy")} onClick={() => void copy()}>
      <Icon name={copied ? "check" : "copy"} />
    </button>
  );
}

function ActionButton({ label, icon, onClick, disabled }: { label: string; icon: IconName; onClick: () => void; disabled?: boolean }) {
  return (
    <button type="button" class="icon" aria-label={label} title={label} disabled={disabled} onClick={onClick}>
      <Icon name={icon} />
    </button>
  );
}

interface CommonProps {
  message: StoredMessage;
  actions: MessageActions;
  busy: boolean;
}

function Toolbar({ message, actions, busy, children }: CommonProps & { children?: ComponentChildren }) {
  const [confirming, setConfirming] = useState(false);
  return (
    <div class="msg-actions">
      <VersionNav versions={message.versions} disabled={busy} onSelect={actions.select} />
      {children}
      <CopyButton text={message.content} />
      <ActionButton label={t("chat.fork")} icon="fork" disabled={busy} onClick={() => actions.fork(message.id)} />
      <ActionButton label={t("chat.deleteVersion")} icon="trash" disabled={busy} onClick={() => setConfirming(true)} />
      {confirming && (
        <Confirm
          message={t("chat.confirmDeleteVersion")}
          confirmLabel={t("chat.deleteVersion")}
          onConfirm={() => {
            setConfirming(false);
            actions.remove(message.id);
          }}
          onCancel={() => setConfirming(false)}
        />
      )}
    </div>
  );
}

// --- a person's message -------------------------------------------------------------------

function EditBox({
  text,
  setText,
  onSave,
  onCancel,
}: {
  text: string;
  setText: (text: string) => void;
  onSave: (text: string) => void;
  onCancel: () => void;
}) {
  return (
    <form
      class="edit-box"
      onSubmit={(e) => {
        e.preventDefault();
        if (text.trim()) onSave(text);
      }}
    >
      <textarea
        aria-label={t("chat.editLabel")}
        value={text}
        rows={Math.min(12, Math.max(3, text.split("\n").length))}
        ref={(el) => el?.focus()}
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === "Escape") {
            e.preventDefault();
            onCancel();
          } else if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && text.trim()) {
            e.preventDefault();
            onSave(text);
          }
        }}
      />
      <div class="edit-actions">
        <button type="button" onClick={onCancel}>
          {t("common.cancel")}
        </button>
        <button type="submit" class="primary" disabled={!text.trim()}>
          {t("chat.saveEdit")}
        </button>
      </div>
    </form>
  );
}

function UserMessageView({ message, actions, busy }: CommonProps) {
  const [editing, setEditing] = useState(false);
  const view = userView(message);
  const [editText, setEditText] = useState(view.text);
  function startEditing() {
    setEditText(view.text);
    setEditing(true);
  }
  async function save(text: string) {
    setEditing(false);
    const accepted = await actions.edit(message, text);
    if (!accepted) setEditing(true);
  }
  return (
    <article class="msg user" aria-label={t("chat.you")}>
      <div class="bubble">
        <Attachments images={view.images} files={view.files} />
        {editing ? (
          <EditBox text={editText} setText={setEditText} onSave={(text) => void save(text)} onCancel={() => setEditing(false)} />
        ) : (
          view.text && <p class="user-text">{view.text}</p>
        )}
      </div>
      {!editing && (
        <Toolbar message={message} actions={actions} busy={busy}>
          <ActionButton label={t("common.edit")} icon="edit" disabled={busy} onClick={startEditing} />
        </Toolbar>
      )}
    </article>
  );
}

export const UserMessage = pure(UserMessageView);

/** A message just sent, until the conversation is read again. */
export function DraftMessage({ user }: { user: UserDraft }) {
  const refs = draftRefs(user.attachments);
  return (
    <article class="msg user draft" aria-label={t("chat.you")}>
      <div class="bubble">
        <Attachments images={refs.images} files={refs.files} />
        {user.text && <p class="user-text">{user.text}</p>}
      </div>
    </article>
  );
}

// --- replies ---------------------------------------------------------------------------------

function Meta({ state, usdSpent, complete }: { state: ReplyState; usdSpent: number | null; complete: boolean }) {
  const bits: string[] = [];
  if (state.model) bits.push(state.model);
  const usage = state.usage;
  if (usage && (usage.input || usage.output)) {
    bits.push(t("chat.tokens", { input: count(usage.input), output: count(usage.output) }));
  }
  if (usdSpent !== null && (usdSpent > 0 || complete)) bits.push(spend(usdSpent, complete));
  if (!bits.length) return null;
  return <span class="msg-meta">{bits.join(" · ")}</span>;
}

/** Error codes of a reply stopped on purpose: its "interrupted" status says it all. */
const SAYS_STOPPED = new Set(["cancelled", "superseded"]);

const STATUS_LABEL: Record<string, "chat.status.failed" | "chat.status.interrupted" | "chat.status.incomplete"> = {
  failed: "chat.status.failed",
  interrupted: "chat.status.interrupted",
  incomplete: "chat.status.incomplete",
};

function AssistantMessageView({ message, actions, busy, notes }: CommonProps & { notes: string[] | undefined }) {
  const state = storedReply(message);
  const spend = messageSpend(message.usage);
  const awaiting = message.status === "awaiting_approval" && state.pending.length > 0;
  const streaming = message.status === "streaming";
  const retry = needsRetry(message.status);
  return (
    <article class={`msg assistant status-${message.status}`} aria-label={t("chat.assistant")}>
      <ReplyBody
        state={state}
        streaming={streaming}
        citePrefix={citePrefix(message.id)}
        hidePending={awaiting}
        notes={notes}
        quietError={message.status === "interrupted" && SAYS_STOPPED.has(state.error?.code ?? "")}
      />
      {awaiting && (
        <Approvals pending={state.pending} disabled={busy} onSubmit={(decisions) => actions.decide(message, decisions)} />
      )}
      {retry && (
        <p class="msg-status">
          <span>{t(STATUS_LABEL[message.status])}</span>
          <button type="button" disabled={busy} onClick={() => actions.regenerate(message.id)}>
            {t("common.retry")}
          </button>
        </p>
      )}
      <footer class="msg-footer">
        <Meta state={state} usdSpent={spend?.usd ?? null} complete={spend?.complete ?? true} />
        <Toolbar message={message} actions={actions} busy={busy || streaming}>
          <ActionButton label={t("chat.regenerate")} icon="regenerate" disabled={busy || streaming} onClick={() => actions.regenerate(message.id)} />
        </Toolbar>
      </footer>
    </article>
  );
}

export const AssistantMessage = pure(AssistantMessageView);

/** The reply being written. Only this component reads the reply's signal, so a token
 * re-renders it alone. */
export function LiveReply({ controller }: { controller: ChatController }) {
  const state = controller.reply.value;
  if (!state) return null;
  const running = isRunning(state);
  return (
    <article class="msg assistant live" aria-label={t("chat.assistant")} aria-busy={running}>
      <ReplyBody state={state} streaming={running} citePrefix={citePrefix(state.messageId)} hidePending={false} />
      {state.phase === "cancelled" && <p class="msg-status">{t("chat.status.interrupted")}</p>}
      <footer class="msg-footer">
        <Meta state={state} usdSpent={state.cost?.response_usd ?? null} complete={state.cost?.complete ?? true} />
      </footer>
    </article>
  );
}
