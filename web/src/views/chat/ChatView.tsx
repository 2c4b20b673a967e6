// The chat screen: a new chat (conversationId null) or a stored conversation, its
// messages, the reply being written, the composer and its pickers, and the conversation's
// summary. The logic is in controller.ts; this file lays it out.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ErrorNote } from "../../components/ErrorNote";
import { t } from "../../i18n";
import { onLinkClick } from "../../router";
import "./chat.css";
import { Composer } from "./Composer";
import { ChatController, isNotFound } from "./controller";
import { listItems, type Item } from "./items";
import { MessageList } from "./MessageList";
import { branchSpend } from "./messages";
import { AssistantMessage, DraftMessage, LiveReply, UserMessage, type MessageActions } from "./MessageView";
import { Pickers } from "./Pickers";
import { SummaryPanel } from "./SummaryPanel";
import { filesOf } from "./attachments";
import { spend as spendText } from "./format";

function useController(conversationId: string | null): ChatController {
  const opened = useRef(conversationId);
  const controller = useMemo(() => {
    const made = new ChatController();
    made.open(conversationId);
    return made;
  }, []);
  useEffect(() => {
    if (opened.current === conversationId) return;
    opened.current = conversationId;
    controller.open(conversationId);
  }, [conversationId]);
  useEffect(() => () => controller.dispose(), []);
  return controller;
}

/** Esc stops the reply from anywhere on the page (not while a dialog is open). */
function useEscapeStops(controller: ChatController): void {
  useEffect(() => {
    function onKey(event: KeyboardEvent) {
      if (event.key !== "Escape" || event.defaultPrevented || !controller.replying) return;
      if (document.querySelector("dialog[open]")) return;
      event.preventDefault();
      controller.stop();
    }
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, [controller]);
}

function Header({ controller, onSummary }: { controller: ChatController; onSummary: () => void }) {
  const detail = controller.detail.value;
  const spend = detail ? branchSpend(detail.messages) : null;
  const title = detail ? detail.title || t("chat.untitled") : controller.id ? t("app.loading") : t("chat.newChat");
  return (
    <header class="chat-header">
      <h1 class="chat-title" title={title}>
        {title}
      </h1>
      {spend && spend.usd > 0 && (
        <span class="chat-cost" title={spend.complete ? undefined : t("chat.costIncomplete")}>
          {t("chat.totalCost", { cost: spendText(spend.usd, spend.complete) })}
        </span>
      )}
      {detail && (
        <button type="button" class="summary-button" onClick={onSummary}>
          {t("chat.summary.button")}
        </button>
      )}
    </header>
  );
}

function Suggestions({ items, onPick, disabled }: { items: string[]; onPick: (text: string) => void; disabled: boolean }) {
  if (!items.length) return null;
  return (
    <ul class="suggestions" aria-label={t("chat.suggestions")}>
      {items.map((text) => (
        <li key={text}>
          <button type="button" class="suggestion" disabled={disabled} onClick={() => onPick(text)}>
            {text}
          </button>
        </li>
      ))}
    </ul>
  );
}

function NotFound() {
  return (
    <div class="empty">
      <p>{t("chat.notFound")}</p>
      <a href="/" onClick={(e) => onLinkClick(e, { name: "chat", id: null })}>
        {t("chat.startNew")}
      </a>
    </div>
  );
}

function Welcome() {
  return (
    <div class="chat-welcome">
      <h2>{t("chat.welcome")}</h2>
      <p class="hint">{t("chat.welcomeHint")}</p>
    </div>
  );
}

export function ChatView({ conversationId }: { conversationId: string | null }) {
  const controller = useController(conversationId);
  useEscapeStops(controller);
  const [summaryOpen, setSummaryOpen] = useState(false);
  const [dropped, setDropped] = useState<File[] | null>(null);
  const [dragging, setDragging] = useState(false);

  const detail = controller.detail.value;
  const placement = controller.placement.value;
  const running = controller.running.value;
  const replying = controller.replying;
  const notes = controller.notes.value;
  const loadError = controller.loadError.value;
  const items = useMemo(() => listItems(detail?.messages ?? [], placement), [detail, placement]);

  const actions = useMemo<MessageActions>(
    () => ({
      regenerate: (id) => void controller.regenerate(id),
      edit: (message, text) => controller.edit(message, text),
      select: (id) => void controller.select(id),
      remove: (id) => void controller.deleteVersion(id),
      fork: (id) => void controller.fork(id),
      decide: (message, decisions) => controller.decide(message, decisions),
    }),
    [controller],
  );

  function renderItem(item: Item) {
    switch (item.kind) {
      case "message":
        return item.message.role === "user" ? (
          <UserMessage message={item.message} actions={actions} busy={running} />
        ) : (
          <AssistantMessage message={item.message} actions={actions} busy={running} notes={notes[item.message.id]} />
        );
      case "draft":
        return <DraftMessage user={item.user} />;
      case "live":
        return <LiveReply controller={controller} />;
    }
  }

  function onDragOver(event: DragEvent) {
    if (!event.dataTransfer?.types.includes("Files")) return;
    event.preventDefault();
    setDragging(true);
  }

  function onDrop(event: DragEvent) {
    const files = filesOf(event.dataTransfer);
    setDragging(false);
    if (!files.length) return;
    event.preventDefault();
    setDropped(files);
  }

  const showList = detail !== null || placement !== null;
  const suggestions = !running && !placement ? (detail?.suggestions ?? []) : [];
  let main;
  if (isNotFound(loadError)) main = <NotFound />;
  else if (loadError !== null) main = <ErrorNote error={loadError} onRetry={() => void controller.reload()} />;
  else if (showList)
    main = (
      <MessageList items={items} listKey={detail?.id ?? "new"} renderItem={renderItem}>
        <Suggestions items={suggestions} disabled={running} onPick={(text) => void controller.send(text, [])} />
      </MessageList>
    );
  else if (controller.id) main = <p class="loading">{t("app.loading")}</p>;
  else main = <Welcome />;

  return (
    <section
      class={dragging ? "chat dragging" : "chat"}
      aria-label={t("chat.label")}
      onDragOver={onDragOver}
      onDragLeave={(e) => e.currentTarget === e.target && setDragging(false)}
      onDrop={onDrop}
    >
      <Header controller={controller} onSummary={() => setSummaryOpen(true)} />
      <div class="chat-main">{main}</div>
      {!isNotFound(loadError) && (
        <div class="chat-bottom">
          {controller.error.value !== null && <ErrorNote error={controller.error.value} />}
          <Pickers
            picks={controller.picks.value}
            onChange={(picks) => controller.setPicks(picks)}
            disabled={running}
          />
          <Composer
            replying={replying}
            dropped={dropped}
            onSend={(text, attachments) => controller.send(text, attachments)}
            onStop={() => controller.stop()}
          />
        </div>
      )}
      <div class="visually-hidden" role="status" aria-live="polite">
        {controller.announcement.value}
      </div>
      {summaryOpen && controller.id && (
        <SummaryPanel conversationId={controller.id} onClose={() => setSummaryOpen(false)} />
      )}
    </section>
  );
}
