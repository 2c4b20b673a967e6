// The message box: Enter sends, Shift+Enter is a new line, Esc stops a reply; it grows
// with its text. Files come by the Attach button, by dropping them on the chat (ChatView
// hands them over) or by pasting; they show as removable chips until sent.
import { useEffect, useRef, useState } from "preact/hooks";
import { t } from "../../i18n";
import { ACCEPT, addFiles, filesOf, formatSize, MAX_TOTAL_BYTES, type Attachment, type Refusal } from "./attachments";
import { Icon } from "../../components/icons";
import { canSend, composerKey } from "./keys";

interface Props {
  replying: boolean;
  /** Resolves false when the message was refused before it was stored: the text and
   * attachments come back. */
  onSend: (text: string, attachments: Attachment[]) => Promise<boolean>;
  onStop: () => void;
  /** Files dropped on the chat, handed over once (a new array each time). */
  dropped?: File[] | null;
  /** Focus the box when it appears. */
  autoFocus?: boolean;
}

const MAX_HEIGHT_SHARE = 0.4;

export function refusalText(refusal: Refusal): string {
  switch (refusal.reason) {
    case "type":
      return t("chat.attach.badType", { name: refusal.name });
    case "size":
      return t("chat.attach.tooLarge", { name: refusal.name, limit: formatSize(refusal.limit) });
    default:
      return t("chat.attach.unreadable", { name: refusal.name });
  }
}

function grow(area: HTMLTextAreaElement | null): void {
  if (!area) return;
  area.style.height = "auto";
  const max = Math.round(window.innerHeight * MAX_HEIGHT_SHARE);
  area.style.height = `${Math.min(area.scrollHeight, max)}px`;
}

function Chip({ attachment, onRemove }: { attachment: Attachment; onRemove: () => void }) {
  return (
    <li class="attach-chip">
      {attachment.kind === "image" ? (
        <img src={attachment.dataUrl} alt="" class="chip-thumb" />
      ) : (
        <Icon name="file" />
      )}
      <span class="chip-name">{attachment.name}</span>
      <span class="chip-size">{formatSize(attachment.size)}</span>
      <button
        type="button"
        class="icon"
        aria-label={t("chat.attach.remove", { name: attachment.name })}
        title={t("chat.attach.remove", { name: attachment.name })}
        onClick={onRemove}
      >
        ×
      </button>
    </li>
  );
}

export function Composer({ replying, onSend, onStop, dropped, autoFocus = true }: Props) {
  const [text, setText] = useState("");
  const [attachments, setAttachments] = useState<Attachment[]>([]);
  const [refused, setRefused] = useState<string[]>([]);
  const area = useRef<HTMLTextAreaElement>(null);
  const picker = useRef<HTMLInputElement>(null);

  useEffect(() => grow(area.current), [text]);
  useEffect(() => {
    // not on touch screens: focusing would open the on-screen keyboard over the chat
    if (autoFocus && window.matchMedia?.("(pointer: fine)")?.matches) area.current?.focus();
  }, []);
  useEffect(() => {
    if (dropped?.length) void attach(dropped);
  }, [dropped]);

  async function attach(files: File[]) {
    const added = await addFiles(files, attachments);
    setAttachments((now) => [...now, ...added.attachments]);
    setRefused(added.refused.map(refusalText));
  }

  async function send() {
    if (!canSend(text, attachments.length, replying)) return;
    const sent = { text, attachments };
    setText("");
    setAttachments([]);
    setRefused([]);
    const accepted = await onSend(sent.text, sent.attachments);
    if (!accepted) {
      setText((now) => now || sent.text);
      setAttachments((now) => (now.length ? now : sent.attachments));
    }
  }

  function onKeyDown(event: KeyboardEvent) {
    const action = composerKey(event, replying);
    if (action === "send") {
      event.preventDefault();
      void send();
    } else if (action === "stop") {
      event.preventDefault();
      onStop();
    }
  }

  function onPaste(event: ClipboardEvent) {
    const files = filesOf(event.clipboardData);
    if (!files.length) return;
    event.preventDefault();
    void attach(files);
  }

  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault();
        void send();
      }}
    >
      {attachments.length > 0 && (
        <ul class="attach-chips" aria-label={t("chat.attach.list")}>
          {attachments.map((a) => (
            <Chip key={a.id} attachment={a} onRemove={() => setAttachments((now) => now.filter((x) => x.id !== a.id))} />
          ))}
        </ul>
      )}
      {refused.length > 0 && (
        <ul class="attach-refused" role="alert">
          {refused.map((line, i) => (
            <li key={i}>{line}</li>
          ))}
        </ul>
      )}
      <div class="composer-row">
        <button
          type="button"
          class="icon attach-button"
          aria-label={t("chat.attach.button")}
          title={t("chat.attach.hint", { limit: formatSize(MAX_TOTAL_BYTES) })}
          onClick={() => picker.current?.click()}
        >
          <Icon name="attach" width="20" height="20" />
        </button>
        <input
          ref={picker}
          type="file"
          multiple
          accept={ACCEPT}
          class="visually-hidden"
          tabIndex={-1}
          aria-hidden="true"
          onChange={(e) => {
            const input = e.currentTarget;
            const files = Array.from(input.files ?? []);
            input.value = "";
            if (files.length) void attach(files);
          }}
        />
        <label for="composer-input" class="visually-hidden">
          {t("chat.message")}
        </label>
        <textarea
          id="composer-input"
          ref={area}
          rows={1}
          placeholder={t("chat.placeholder")}
          value={text}
          onInput={(e) => setText(e.currentTarget.value)}
          onKeyDown={onKeyDown}
          onPaste={onPaste}
        />
        {replying ? (
          <button type="button" class="danger stop-button" onClick={onStop}>
            {t("chat.stop")}
          </button>
        ) : (
          <button type="submit" class="primary send-button" disabled={!canSend(text, attachments.length, false)}>
            {t("chat.send")}
          </button>
        )}
      </div>
    </form>
  );
}
