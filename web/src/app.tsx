// The shell: who is signed in, the sidebar, and the screen the URL names.
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { ErrorNote } from "./components/ErrorNote";
import { Icon } from "./components/icons";
import { searchInputId, Sidebar } from "./components/Sidebar";
import { SignIn } from "./components/SignIn";
import { t } from "./i18n";
import { route } from "./router";
import { loadSession, session } from "./session";
import { ChatView } from "./views/chat/ChatView";
import { KnowledgeView } from "./views/kb/KnowledgeView";
import { AssistantsView } from "./views/settings/AssistantsView";
import { MemoryView } from "./views/settings/MemoryView";
import { SettingsView } from "./views/settings/SettingsView";

function Screen() {
  const current = route.value;
  switch (current.name) {
    case "chat":
      return <ChatView conversationId={current.id} />;
    case "kb":
      return <KnowledgeView kbId={current.id} />;
    case "assistants":
      return <AssistantsView />;
    case "memory":
      return <MemoryView />;
    case "settings":
      return <SettingsView />;
    default:
      return <p class="empty">{t("notFound")}</p>;
  }
}

function useShortcuts(openMenu: () => void) {
  useEffect(() => {
    function onKey(event: KeyboardEvent) {
      if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "k") {
        event.preventDefault();
        openMenu();
        requestAnimationFrame(() => document.getElementById(searchInputId)?.focus());
      }
    }
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, []);
}

/** The phone's menu (the sidebar as a drawer, under 800 px): Esc closes it; focus moves
 * into it when it opens and back to the menu button when it closes. On a wide screen,
 * where the sidebar is always shown (the menu button is not), none of that applies. */
function useDrawer(open: boolean, close: () => void) {
  const menuButton = useRef<HTMLButtonElement>(null);
  const closeButton = useRef<HTMLButtonElement>(null);
  const wasOpen = useRef(open);
  const isDrawer = () => Boolean(menuButton.current?.getClientRects().length);
  // a layout effect: before Ctrl+K's focus on the search box (a frame later)
  useLayoutEffect(() => {
    if (open === wasOpen.current) return;
    wasOpen.current = open;
    if (!isDrawer()) return;
    if (open) closeButton.current?.focus();
    else menuButton.current?.focus();
  }, [open]);
  useEffect(() => {
    if (!open) return;
    // on the document: after a field's own Esc (the rename box), before the chat's (which
    // stops a reply) on the window
    function onKey(event: KeyboardEvent) {
      if (event.key !== "Escape" || event.defaultPrevented || !isDrawer()) return;
      if (document.querySelector("dialog[open]")) return;
      event.preventDefault();
      close();
    }
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [open]);
  return { menuButton, closeButton };
}

export function App() {
  const [error, setError] = useState<unknown>(null);
  const [menuOpen, setMenuOpen] = useState(false);
  useShortcuts(() => setMenuOpen(true));
  const { menuButton, closeButton } = useDrawer(menuOpen, () => setMenuOpen(false));
  useEffect(() => {
    const check = () => loadSession().then(() => setError(null), setError);
    void check();
    addEventListener("parley:unauthorized", check);
    return () => removeEventListener("parley:unauthorized", check);
  }, []);
  const who = session.value;
  if (error !== null && !who) return <ErrorNote error={error} onRetry={() => location.reload()} />;
  if (!who) return <p class="loading">{t("app.loading")}</p>;
  if (!who.signed_in) return <SignIn />;
  return (
    <div class={menuOpen ? "shell menu-open" : "shell"}>
      <header class="topbar">
        <button
          type="button"
          class="icon menu-button"
          ref={menuButton}
          aria-label={t("nav.menu")}
          aria-expanded={menuOpen}
          aria-controls="sidebar"
          onClick={() => setMenuOpen(!menuOpen)}
        >
          <Icon name="menu" width="20" height="20" />
        </button>
        <span class="brand">{t("app.name")}</span>
      </header>
      <div id="sidebar" class="sidebar-wrap">
        {/* the open drawer covers the menu button: its own close button, there while open */}
        {menuOpen && (
          <div class="drawer-head">
            <button
              type="button"
              class="icon drawer-close"
              ref={closeButton}
              aria-label={t("nav.closeMenu")}
              onClick={() => setMenuOpen(false)}
            >
              <Icon name="close" width="20" height="20" />
            </button>
          </div>
        )}
        <Sidebar onNavigate={() => setMenuOpen(false)} />
      </div>
      <div class="scrim" onClick={() => setMenuOpen(false)} />
      <main class="screen" id="main">
        <Screen />
      </main>
    </div>
  );
}
