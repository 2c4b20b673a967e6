import { useState } from "preact/hooks";
import { t } from "../i18n";
import { signIn } from "../session";
import { errorText } from "./ErrorNote";

export function SignIn() {
  const [key, setKey] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  async function submit(event: Event) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await signIn(key.trim());
      setKey("");
    } catch (caught) {
      setError(errorText(caught));
    } finally {
      setBusy(false);
    }
  }
  return (
    <main class="signin">
      <form onSubmit={submit} class="signin-form">
        <h1>{t("signin.title")}</h1>
        <label for="api-key">{t("signin.keyLabel")}</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          spellcheck={false}
          required
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
        />
        <p class="hint">{t("signin.keyHelp")}</p>
        {error && (
          <p class="error-note" role="alert">
            {t("signin.failed", { message: error })}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy || !key.trim()}>
          {t("signin.submit")}
        </button>
      </form>
    </main>
  );
}
