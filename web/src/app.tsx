// The shell: who is signed in, the sidebar, and the screen the URL names.
import { useEffect, useState } from "preact/hooks";
import { ErrorNote } from "./components/ErrorNote";
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

export function App() {
  const [error, setError] = useState<unknown>(null);
  const [menuOpen, setMenuOpen] = useState(false);
  useShortcuts(() => setMenuOpen(true));
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
          aria-label={menuOpen ? t("nav.closeMenu") : t("nav.menu")}
          aria-expanded={menuOpen}
          aria-controls="sidebar"
          onClick={() => setMenuOpen(!menuOpen)}
        >
          ☰
        </button>
        <span class="brand">{t("app.name")}</span>
      </header>
      <div id="sidebar" class="sidebar-wrap">
        <Sidebar onNavigate={() => setMenuOpen(false)} />
      </div>
      <div class="scrim" onClick={() => setMenuOpen(false)} />
      <main class="screen" id="main">
        <Screen />
      </main>
    </div>
  );
}
