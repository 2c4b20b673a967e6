// Conversations newest first (paged as the list scrolls), search (Ctrl/Cmd+K), rename,
// delete, new chat; and the links to the other screens.
import { useEffect, useRef, useState } from "preact/hooks";
import * as store from "../conversations";
import { t } from "../i18n";
import { navigate, onLinkClick, route, type Route } from "../router";
import { session, signOut } from "../session";
import type { ConversationSummary } from "../types";
import { Confirm } from "./Confirm";
import { ErrorNote } from "./ErrorNote";
import { Icon } from "./icons";

export const searchInputId = "conversation-search";

function NavLink({ to, label }: { to: Route; label: string }) {
  const current = route.value.name === to.name;
  return (
    <a
      href={to.name === "chat" ? "/" : `/${to.name}`}
      aria-current={current ? "page" : undefined}
      onClick={(e) => onLinkClick(e, to)}
    >
      {label}
    </a>
  );
}

function Item({ conversation }: { conversation: ConversationSummary }) {
  const [editing, setEditing] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const active = route.value.name === "chat" && route.value.id === conversation.id;
  const title = conversation.title || t("nav.newChat");
  async function rename(value: string) {
    setEditing(false);
    if (value.trim() && value.trim() !== conversation.title) {
      await store.rename(conversation.id, value.trim()).catch(setError);
    }
  }
  async function remove() {
    setConfirming(false);
    try {
      await store.remove(conversation.id);
      if (active) navigate({ name: "chat", id: null }, { replace: true });
    } catch (caught) {
      setError(caught);
    }
  }
  return (
    <li class={active ? "conversation active" : "conversation"}>
      {editing ? (
        <input
          class="rename"
          aria-label={t("common.rename")}
          defaultValue={conversation.title ?? ""}
          ref={(el) => el?.focus()}
          onKeyDown={(e) => {
            if (e.key === "Enter") void rename(e.currentTarget.value);
            if (e.key === "Escape") {
              e.preventDefault(); // the rename only, not the phone's menu too
              setEditing(false);
            }
          }}
          onBlur={(e) => void rename(e.currentTarget.value)}
        />
      ) : (
        <a
          href={`/c/${encodeURIComponent(conversation.id)}`}
          aria-current={active ? "page" : undefined}
          onClick={(e) => onLinkClick(e, { name: "chat", id: conversation.id })}
          title={title}
        >
          {title}
        </a>
      )}
      <span class="item-actions">
        <button type="button" class="icon" aria-label={`${t("common.rename")}: ${title}`} onClick={() => setEditing(true)}>
          <Icon name="edit" />
        </button>
        <button type="button" class="icon" aria-label={`${t("common.delete")}: ${title}`} onClick={() => setConfirming(true)}>
          <Icon name="trash" />
        </button>
      </span>
      {confirming && (
        <Confirm
          message={t("common.confirmDelete", { name: title })}
          onConfirm={() => void remove()}
          onCancel={() => setConfirming(false)}
        />
      )}
      {error !== null && <ErrorNote error={error} />}
    </li>
  );
}

export function Sidebar({ onNavigate }: { onNavigate?: () => void }) {
  const sentinel = useRef<HTMLLIElement>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    store.reload().catch(setError);
  }, []);
  useEffect(() => {
    const target = sentinel.current;
    if (!target) return;
    const observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) store.loadMore().catch(setError);
    });
    observer.observe(target);
    return () => observer.disconnect();
  }, [store.hasMore.value]);
  useEffect(() => {
    const timer = setTimeout(() => store.reload().catch(setError), 250);
    return () => clearTimeout(timer);
  }, [store.query.value]);
  const who = session.value;
  return (
    <nav class="sidebar" aria-label={t("nav.chats")} onClick={(e) => {
      if ((e.target as HTMLElement).closest("a")) onNavigate?.();
    }}>
      <div class="sidebar-top">
        <a
          class="button primary new-chat"
          href="/"
          onClick={(e) => onLinkClick(e, { name: "chat", id: null })}
        >
          + {t("nav.newChat")}
        </a>
        <input
          id={searchInputId}
          type="search"
          placeholder={`${t("common.search")} (Ctrl+K)`}
          aria-label={t("common.search")}
          value={store.query.value}
          onInput={(e) => (store.query.value = e.currentTarget.value)}
        />
      </div>
      <ul class="conversations" aria-busy={store.loading.value}>
        {store.conversations.value.map((c) => (
          <Item key={c.id} conversation={c} />
        ))}
        {store.hasMore.value && <li ref={sentinel} class="sentinel">{t("app.loading")}</li>}
      </ul>
      {error !== null && <ErrorNote error={error} onRetry={() => store.reload().catch(setError)} />}
      <div class="sidebar-links">
        <NavLink to={{ name: "kb", id: null }} label={t("nav.knowledge")} />
        <NavLink to={{ name: "assistants" }} label={t("nav.assistants")} />
        <NavLink to={{ name: "memory" }} label={t("nav.memory")} />
        <NavLink to={{ name: "settings" }} label={t("nav.settings")} />
        {who?.keys_required && who.signed_in && (
          <button type="button" class="link" onClick={() => void signOut()}>
            {t("signout")} ({who.key_name ?? who.owner})
          </button>
        )}
      </div>
    </nav>
  );
}
