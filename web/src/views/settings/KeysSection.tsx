// Settings > API keys (admins): list, create (the key is shown once), revoke. Revoking
// the key this browser signed in with ends this session too.
import { signal } from "@preact/signals";
import { useEffect, useRef, useState } from "preact/hooks";
import { api } from "../../api";
import { Confirm } from "../../components/Confirm";
import { ErrorNote } from "../../components/ErrorNote";
import { lang, t } from "../../i18n";
import { loadSession, session, signIn } from "../../session";
import { useLoad, when } from "./data";
import type { ApiKeyRecord } from "./types";

/** GET /v1/keys may answer a list object or a bare array. */
export function keyRows(answer: { data?: ApiKeyRecord[] } | ApiKeyRecord[]): ApiKeyRecord[] {
  return Array.isArray(answer) ? answer : (answer.data ?? []);
}

export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}

/** The key just made, until the person says they have copied it. Kept outside the
 * component (in memory only, never stored) so that it survives the page re-rendering
 * around a change of session: the first key ends keyless use. */
export const freshKey = signal<{ record: ApiKeyRecord; firstKey: boolean } | null>(null);

export function KeysSection() {
  const keys = useLoad(() => api<{ data?: ApiKeyRecord[] } | ApiKeyRecord[]>("/v1/keys").then(keyRows));
  const [name, setName] = useState("");
  const [owner, setOwner] = useState("");
  const [admin, setAdmin] = useState(false);
  const [confirmFirst, setConfirmFirst] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [revoking, setRevoking] = useState<ApiKeyRecord | null>(null);
  const [notice, setNotice] = useState("");
  const [showRevoked, setShowRevoked] = useState(false);
  const mine = session.value?.key_id ?? null;
  // With no key yet, the first one ends keyless use: it is an admin key (or this browser
  // could manage nothing after it), and this browser signs in with it at once.
  const first = session.value?.keys_required === false;
  const activeCount = (keys.data ?? []).filter((k) => !k.revoked_at).length;

  function submit(event: Event) {
    event.preventDefault();
    if (first) setConfirmFirst(true);
    else void create();
  }

  async function create() {
    setConfirmFirst(false);
    setBusy(true);
    setError(null);
    try {
      const body: Record<string, unknown> = { name: name.trim(), admin: first || admin };
      if (owner.trim()) body.owner = owner.trim();
      const key = await api<ApiKeyRecord>("/v1/keys", { method: "POST", body });
      freshKey.value = { record: key, firstKey: first };
      setName("");
      setOwner("");
      setAdmin(false);
      const row = { ...key };
      delete row.key; // the list never keeps the secret
      keys.set([...(keys.data ?? []).filter((k) => k.id !== key.id), row]);
      if (first && key.key) {
        await signIn(key.key);
        await loadSession();
      }
    } catch (caught) {
      setError(caught);
    } finally {
      setBusy(false);
    }
  }

  async function revoke(key: ApiKeyRecord) {
    setRevoking(null);
    setError(null);
    try {
      const revoked = await api<ApiKeyRecord | undefined>(`/v1/keys/${encodeURIComponent(key.id)}`, { method: "DELETE" });
      const at = revoked?.revoked_at ?? Date.now() / 1000;
      keys.set((keys.data ?? []).map((k) => (k.id === key.id ? { ...k, revoked_at: at } : k)));
      setNotice(t("keys.revokedNotice", { name: key.name }));
      // this browser's own key: signed out (the app shows sign-in), or, with no key left,
      // back to keyless use on this machine
      if (key.id === mine || activeCount === 1) await loadSession().catch(() => undefined);
    } catch (caught) {
      setError(caught);
    }
  }

  const all = keys.data ?? [];
  const rows = showRevoked ? all : all.filter((k) => !k.revoked_at);
  const revokedCount = all.length - activeCount;
  return (
    <section class="settings-section" aria-labelledby="keys-heading">
      <h2 id="keys-heading">{t("keys.title")}</h2>
      <p class="hint">{t("keys.intro")}</p>
      <p class="visually-hidden" role="status">
        {notice}
      </p>
      {freshKey.value?.record.key && (
        <NewKey
          record={freshKey.value.record}
          firstKey={freshKey.value.firstKey}
          onDone={() => (freshKey.value = null)}
        />
      )}
      <form class="settings-form compact" onSubmit={submit} aria-label={t("keys.create")}>
        <div class="field-grid key-fields">
        <div class="field">
          <label for="key-name">{t("keys.name")}</label>
          <input
            id="key-name"
            required
            maxLength={200}
            value={name}
            onInput={(e) => setName(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="key-owner">{t("keys.ownerLabel")}</label>
          <input
            id="key-owner"
            maxLength={200}
            placeholder={session.value?.owner ?? ""}
            aria-describedby="key-owner-hint"
            value={owner}
            onInput={(e) => setOwner(e.currentTarget.value)}
          />
          <p id="key-owner-hint" class="hint field-hint">
            {t("keys.ownerHint", { owner: session.value?.owner ?? t("settings.local") })}
          </p>
        </div>
        </div>
        <div class="check">
          <input
            id="key-admin"
            type="checkbox"
            checked={first || admin}
            disabled={first}
            onChange={(e) => setAdmin(e.currentTarget.checked)}
            aria-describedby="key-admin-hint"
          />
          <label for="key-admin">{t("keys.admin")}</label>
          <p id="key-admin-hint" class="hint check-hint">
            {first ? t("keys.firstAdminHint") : t("keys.adminHint")}
          </p>
        </div>
        <div class="form-actions">
          <button type="submit" class="primary" disabled={busy || !name.trim()}>
            {t("keys.createButton")}
          </button>
        </div>
      </form>
      {error !== null && <ErrorNote error={error} />}
      {keys.error !== null && <ErrorNote error={keys.error} onRetry={keys.reload} />}
      {keys.loading && !keys.data && <p class="loading">{t("app.loading")}</p>}
      {keys.data && rows.length === 0 && <p class="empty">{t("keys.empty")}</p>}
      {rows.length > 0 && (
        <div class="table-wrap">
          <table class="data keys">
            <caption class="visually-hidden">{t("keys.title")}</caption>
            <thead>
              <tr>
                <th scope="col">{t("keys.name")}</th>
                <th scope="col">{t("keys.owner")}</th>
                <th scope="col">{t("keys.prefix")}</th>
                <th scope="col">{t("keys.role")}</th>
                <th scope="col">{t("keys.created")}</th>
                <th scope="col">
                  <span class="visually-hidden">{t("keys.actions")}</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((key) => (
                <tr key={key.id} class={key.revoked_at ? "revoked" : undefined}>
                  <td data-label={t("keys.name")}>
                    {key.name}
                    {key.id === mine && <span class="badge ok">{t("keys.thisSession")}</span>}
                  </td>
                  <td data-label={t("keys.owner")}>{key.owner ?? ""}</td>
                  <td data-label={t("keys.prefix")}>
                    <code>{key.prefix ? `${key.prefix}…` : key.id}</code>
                  </td>
                  <td data-label={t("keys.role")}>{key.admin ? t("keys.roleAdmin") : t("keys.roleUser")}</td>
                  <td data-label={t("keys.created")}>{when(key.created_at, lang.value)}</td>
                  <td>
                    {key.revoked_at ? (
                      <span class="hint">{t("keys.revokedAt", { when: when(key.revoked_at, lang.value) })}</span>
                    ) : (
                      <button
                        type="button"
                        class="danger"
                        aria-label={t("keys.revokeNamed", { name: key.name })}
                        onClick={() => setRevoking(key)}
                      >
                        {t("keys.revoke")}
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {revokedCount > 0 && (
        <div class="check">
          <input id="keys-show-revoked" type="checkbox" checked={showRevoked} onChange={(e) => setShowRevoked(e.currentTarget.checked)} />
          <label for="keys-show-revoked">{t("keys.showRevoked", { count: revokedCount })}</label>
        </div>
      )}
      {confirmFirst && (
        <Confirm
          message={t("keys.confirmFirst")}
          confirmLabel={t("keys.createButton")}
          danger={false}
          onConfirm={() => void create()}
          onCancel={() => setConfirmFirst(false)}
        />
      )}
      {revoking && (
        <Confirm
          message={
            activeCount === 1
              ? t("keys.confirmRevokeLast", { name: revoking.name })
              : revoking.id === mine
              ? t("keys.confirmRevokeOwn", { name: revoking.name })
              : t("keys.confirmRevoke", { name: revoking.name })
          }
          confirmLabel={t("keys.revoke")}
          onConfirm={() => void revoke(revoking)}
          onCancel={() => setRevoking(null)}
        />
      )}
    </section>
  );
}

/** The new key, shown once, with a Copy button. */
function NewKey({ record, firstKey, onDone }: { record: ApiKeyRecord; firstKey: boolean; onDone: () => void }) {
  const [copied, setCopied] = useState<boolean | null>(null);
  const field = useRef<HTMLInputElement>(null);
  useEffect(() => {
    field.current?.focus();
    field.current?.select();
  }, []);
  return (
    <div class="new-key" role="region" aria-labelledby="new-key-title">
      <h3 id="new-key-title">{t("keys.newTitle", { name: record.name })}</h3>
      <p class="warning" id="new-key-warning">
        {t("keys.newWarning")}
      </p>
      {firstKey && <p class="hint">{t("keys.firstKey")}</p>}
      <label for="new-key-value">{t("keys.newLabel")}</label>
      <div class="inline">
        <input
          id="new-key-value"
          ref={field}
          class="code"
          readOnly
          value={record.key}
          aria-describedby="new-key-warning"
          onFocus={(e) => e.currentTarget.select()}
        />
        <button type="button" onClick={() => void copyText(record.key ?? "").then(setCopied)}>
          {t("keys.copy")}
        </button>
      </div>
      <p role="status" class="hint">
        {copied === true ? t("common.copied") : copied === false ? t("keys.copyFailed") : ""}
      </p>
      <button type="button" class="primary" onClick={onDone}>
        {t("keys.done")}
      </button>
    </div>
  );
}
