// /settings: appearance (theme, language), usage, MCP servers, API keys (admins), the
// account this browser acts as, and the way to connect another client.
import { useState } from "preact/hooks";
import { ErrorNote } from "../../components/ErrorNote";
import { lang, setLang, t, type Lang } from "../../i18n";
import { session, signOut } from "../../session";
import { setTheme, theme, type Theme } from "../../theme";
import { KeysSection } from "./KeysSection";
import { McpSection } from "./McpSection";
import { UsageSection } from "./UsageSection";
import "./settings.css";

function Appearance() {
  return (
    <section class="settings-section" aria-labelledby="appearance-heading">
      <h2 id="appearance-heading">{t("settings.appearance")}</h2>
      <div class="field-grid">
        <div class="field">
          <label for="settings-theme">{t("theme.label")}</label>
          <select id="settings-theme" value={theme.value} onChange={(e) => setTheme(e.currentTarget.value as Theme)}>
            <option value="system">{t("theme.system")}</option>
            <option value="light">{t("theme.light")}</option>
            <option value="dark">{t("theme.dark")}</option>
          </select>
        </div>
        <div class="field">
          <label for="settings-lang">{t("lang.label")}</label>
          <select id="settings-lang" value={lang.value} onChange={(e) => setLang(e.currentTarget.value as Lang)}>
            {/* each language named in itself */}
            <option value="en" lang="en">
              English
            </option>
            <option value="zh" lang="zh-CN">
              简体中文
            </option>
          </select>
        </div>
      </div>
    </section>
  );
}

function Account() {
  const who = session.value;
  const [error, setError] = useState<unknown>(null);
  if (!who) return null;
  const keyless = !who.keys_required;
  return (
    <section class="settings-section" aria-labelledby="account-heading">
      <h2 id="account-heading">{t("settings.account")}</h2>
      <dl class="facts">
        <dt>{t("settings.signedInAs")}</dt>
        <dd>{keyless ? t("settings.localAccess") : t("settings.keyNamed", { name: who.key_name ?? who.key_id ?? "" })}</dd>
        <dt>{t("settings.owner")}</dt>
        <dd>{who.owner ?? t("settings.local")}</dd>
        <dt>{t("settings.role")}</dt>
        <dd>{who.admin ? t("keys.roleAdmin") : t("keys.roleUser")}</dd>
      </dl>
      {keyless && <p class="hint">{t("settings.localHint")}</p>}
      {error !== null && <ErrorNote error={error} />}
      {who.keys_required && who.signed_in && (
        <button type="button" onClick={() => void signOut().catch(setError)}>
          {t("signout")}
        </button>
      )}
    </section>
  );
}

export function SettingsView() {
  const admin = !!session.value?.admin;
  return (
    <section class="page settings-page" aria-labelledby="settings-heading">
      <h1 id="settings-heading">{t("settings.title")}</h1>
      <nav class="settings-toc" aria-label={t("settings.sections")}>
        <a href="#appearance-heading">{t("settings.appearance")}</a>
        <a href="#usage-heading">{t("usage.title")}</a>
        <a href="#mcp-heading">{t("mcp.title")}</a>
        {admin && <a href="#keys-heading">{t("keys.title")}</a>}
        <a href="#account-heading">{t("settings.account")}</a>
        <a href="#connect-heading">{t("settings.connectTitle")}</a>
      </nav>
      <Appearance />
      <UsageSection />
      <McpSection />
      {admin && <KeysSection />}
      <Account />
      <section class="settings-section" aria-labelledby="connect-heading">
        <h2 id="connect-heading">{t("settings.connectTitle")}</h2>
        <p class="hint">{t("settings.connectHint")}</p>
        <a class="button" href="/connect">
          {t("settings.connect")}
        </a>
      </section>
    </section>
  );
}
