// Settings > MCP servers: each server's health and tools; admins add, edit and remove
// the servers added over the API (the config file's are read-only here).
import { useState } from "preact/hooks";
import { api, ApiError } from "../../api";
import { Confirm } from "../../components/Confirm";
import { ErrorNote, errorText } from "../../components/ErrorNote";
import { t, type Key } from "../../i18n";
import { session } from "../../session";
import { listMcpServers, useLoad } from "./data";
import { describedBy, Field, FieldError, Switch, type Problem } from "./fields";
import {
  emptyMcpForm,
  fromConfig,
  mcpFieldOf,
  mcpPatch,
  toMcpPayload,
  type McpForm,
  type Transport,
} from "./mcpForm";
import type { McpServer, McpTool } from "./types";

/** How a server is doing, as one short sentence. */
export function serverStatus(server: McpServer): { text: string; tone: "ok" | "warn" | "bad" | "off" } {
  if (server.refused) return { text: t("mcp.status.refused"), tone: "bad" };
  if (server.enabled === false) return { text: t("mcp.status.disabled"), tone: "off" };
  if (server.quarantined_for_seconds) {
    return {
      text: t("mcp.status.quarantined", { seconds: Math.ceil(server.quarantined_for_seconds) }),
      tone: "bad",
    };
  }
  if (server.connected) return { text: t("mcp.status.connected"), tone: "ok" };
  if (server.consecutive_failures) {
    return { text: t("mcp.status.failing", { count: server.consecutive_failures }), tone: "warn" };
  }
  return { text: t("mcp.status.idle"), tone: "off" };
}

export function McpSection() {
  const admin = !!session.value?.admin;
  const servers = useLoad(listMcpServers);
  const [adding, setAdding] = useState(false);
  const [notice, setNotice] = useState("");
  const rows = servers.data ?? [];
  return (
    <section class="settings-section" aria-labelledby="mcp-heading">
      <div class="settings-head">
        <h2 id="mcp-heading">{t("mcp.title")}</h2>
        <div class="inline">
          <button type="button" onClick={servers.reload} disabled={servers.loading}>
            {t("mcp.refresh")}
          </button>
          {admin && !adding && (
            <button type="button" class="primary" onClick={() => setAdding(true)}>
              + {t("mcp.add")}
            </button>
          )}
        </div>
      </div>
      <p class="hint">{t("mcp.intro")}</p>
      <p class="visually-hidden" role="status">
        {notice}
      </p>
      {adding && (
        <McpEditor
          server={null}
          onSaved={(server) => {
            setAdding(false);
            servers.set([...rows.filter((s) => s.name !== server.name), server]);
            setNotice(t("mcp.added", { name: server.name }));
          }}
          onCancel={() => setAdding(false)}
        />
      )}
      {servers.error !== null && <ErrorNote error={servers.error} onRetry={servers.reload} />}
      {servers.loading && !servers.data && <p class="loading">{t("app.loading")}</p>}
      {servers.data && rows.length === 0 && <p class="empty">{t("mcp.empty")}</p>}
      {rows.length > 0 && (
        <ul class="card-list" aria-label={t("mcp.title")}>
          {rows.map((server) => (
            <ServerItem
              key={server.name}
              server={server}
              admin={admin}
              onChanged={(changed) => {
                servers.set(rows.map((s) => (s.name === server.name ? changed : s)));
                setNotice(t("mcp.saved", { name: server.name }));
              }}
              onRemoved={() => {
                servers.set(rows.filter((s) => s.name !== server.name));
                setNotice(t("mcp.removed", { name: server.name }));
              }}
            />
          ))}
        </ul>
      )}
    </section>
  );
}

function ServerItem({
  server,
  admin,
  onChanged,
  onRemoved,
}: {
  server: McpServer;
  admin: boolean;
  onChanged: (server: McpServer) => void;
  onRemoved: () => void;
}) {
  const [open, setOpen] = useState(false);
  const [editing, setEditing] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const status = serverStatus(server);
  const editable = admin && server.source === "api";
  const toolsId = `mcp-tools-${server.name}`;

  async function remove() {
    setConfirming(false);
    setError(null);
    try {
      await api(`/v1/mcp/servers/${encodeURIComponent(server.name)}`, { method: "DELETE" });
      onRemoved();
    } catch (caught) {
      setError(caught);
    }
  }

  return (
    <li class="card mcp-server">
      <div class="card-main">
        <h3 class="card-title">
          {server.name} <span class={`badge ${status.tone}`}>{status.text}</span>
        </h3>
        <dl class="facts">
          <dt>{t("mcp.transport")}</dt>
          <dd>{server.transport ?? "—"}</dd>
          <dt>{t("mcp.source")}</dt>
          <dd>{server.source === "config" ? t("mcp.sourceConfig") : t("mcp.sourceApi")}</dd>
          <dt>{t("mcp.enabled")}</dt>
          <dd>{server.enabled === false ? t("common.no") : t("common.yes")}</dd>
          {server.tool_count !== null && (
            <>
              <dt>{t("mcp.toolCount")}</dt>
              <dd>{server.tool_count}</dd>
            </>
          )}
          {server.latency_ms !== null && (
            <>
              <dt>{t("mcp.latency")}</dt>
              <dd>{t("mcp.ms", { ms: Math.round(server.latency_ms) })}</dd>
            </>
          )}
          {!!server.consecutive_failures && (
            <>
              <dt>{t("mcp.failures")}</dt>
              <dd>{server.consecutive_failures}</dd>
            </>
          )}
          {server.config && server.config.transport === "stdio" && (
            <>
              <dt>{t("mcp.command")}</dt>
              <dd>
                <code>{[server.config.command ?? "", ...server.config.args].join(" ")}</code>
              </dd>
            </>
          )}
          {server.config && server.config.transport !== "stdio" && server.config.url && (
            <>
              <dt>{t("mcp.url")}</dt>
              <dd>
                <code>{server.config.url}</code>
              </dd>
            </>
          )}
          {server.config && (
            <>
              <dt>{t("mcp.timeout")}</dt>
              <dd>{t("mcp.seconds", { seconds: server.config.timeout })}</dd>
            </>
          )}
        </dl>
        {admin && server.source === "config" && <p class="hint">{t("mcp.configReadOnly")}</p>}
        {server.refused && (
          <p class="problem">
            <strong>{t("mcp.refused")}</strong> {server.refused}
          </p>
        )}
        {server.last_error && (
          <p class="problem">
            <strong>{t("mcp.lastError")}</strong> <span class="pre">{server.last_error}</span>
          </p>
        )}
        {server.skipped_tools.length > 0 && (
          <div class="problem">
            <strong>{t("mcp.skippedTools")}</strong>
            <ul>
              {server.skipped_tools.map((tool) => (
                <li key={tool.name}>
                  <code>{tool.name}</code>: {tool.reason}
                </li>
              ))}
            </ul>
          </div>
        )}
        {error !== null && <ErrorNote error={error} />}
        {open && <ToolList id={toolsId} name={server.name} />}
        {editing && server.config && (
          <McpEditor
            server={server}
            onSaved={(changed) => {
              setEditing(false);
              onChanged(changed);
            }}
            onCancel={() => setEditing(false)}
          />
        )}
      </div>
      <div class="card-actions">
        <button
          type="button"
          aria-expanded={open}
          aria-controls={open ? toolsId : undefined}
          aria-label={t(open ? "mcp.hideToolsNamed" : "mcp.showToolsNamed", { name: server.name })}
          onClick={() => setOpen(!open)}
        >
          {open ? t("mcp.hideTools") : t("mcp.showTools")}
        </button>
        {editable && server.config && !editing && (
          <button
            type="button"
            aria-label={t("mcp.editNamed", { name: server.name })}
            onClick={() => setEditing(true)}
          >
            {t("common.edit")}
          </button>
        )}
        {editable && (
          <button
            type="button"
            class="danger"
            aria-label={t("mcp.removeNamed", { name: server.name })}
            onClick={() => setConfirming(true)}
          >
            {t("mcp.remove")}
          </button>
        )}
      </div>
      {confirming && (
        <Confirm
          message={t("mcp.confirmRemove", { name: server.name })}
          confirmLabel={t("mcp.remove")}
          onConfirm={() => void remove()}
          onCancel={() => setConfirming(false)}
        />
      )}
    </li>
  );
}

function ToolList({ id, name }: { id: string; name: string }) {
  const tools = useLoad(() =>
    api<{ data: McpTool[] }>(`/v1/mcp/servers/${encodeURIComponent(name)}/tools`).then((page) => page.data),
  );
  return (
    <div id={id} class="mcp-tools" aria-busy={tools.loading}>
      {tools.loading && <p class="hint">{t("mcp.connecting")}</p>}
      {tools.error !== null && <ErrorNote error={tools.error} onRetry={tools.reload} />}
      {tools.data && tools.data.length === 0 && <p class="hint">{t("mcp.noTools")}</p>}
      {tools.data && tools.data.length > 0 && (
        <ul aria-label={t("mcp.toolsOf", { name })}>
          {tools.data.map((tool) => (
            <li key={tool.name}>
              <code>{tool.name}</code>
              {tool.description && <p class="hint tool-description">{tool.description}</p>}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

function McpEditor({
  server,
  onSaved,
  onCancel,
}: {
  server: McpServer | null;
  onSaved: (server: McpServer) => void;
  onCancel: () => void;
}) {
  const [form, setForm] = useState<McpForm>(() =>
    server?.config ? fromConfig(server.name, server.config) : emptyMcpForm(),
  );
  const [problems, setProblems] = useState<Partial<Record<keyof McpForm | "form", Problem>>>({});
  const [busy, setBusy] = useState(false);
  const prefix = server ? `mcp-edit-${server.name}` : "mcp-new";
  const update = (change: Partial<McpForm>) => setForm((current) => ({ ...current, ...change }));

  async function submit(event: Event) {
    event.preventDefault();
    const { payload, errors } = toMcpPayload(form, !server);
    if (Object.keys(errors).length) {
      setProblems(errors);
      return;
    }
    setProblems({});
    setBusy(true);
    try {
      let saved: McpServer;
      if (server && server.config) {
        const patch = mcpPatch(server.name, server.config, form);
        saved = Object.keys(patch).length
          ? await api<McpServer>(`/v1/mcp/servers/${encodeURIComponent(server.name)}`, { method: "PATCH", body: patch })
          : server;
      } else {
        saved = await api<McpServer>("/v1/mcp/servers", { method: "POST", body: payload });
      }
      onSaved(saved);
    } catch (caught) {
      const field = caught instanceof ApiError ? mcpFieldOf(caught.param) : "form";
      setProblems({ [field]: { text: errorText(caught) } });
    } finally {
      setBusy(false);
    }
  }

  const id = (field: string) => `${prefix}-${field}`;
  const p = (field: keyof McpForm | "form") => problems[field];
  const input = (field: "name" | "command" | "cwd" | "url" | "timeout" | "bearer_token", label: Key, hint?: Key, extra: Record<string, unknown> = {}) => (
    <Field id={id(field)} label={t(label)} hint={hint ? t(hint) : undefined} problem={p(field)}>
      <input
        id={id(field)}
        value={form[field]}
        spellcheck={false}
        aria-invalid={p(field) ? true : undefined}
        aria-describedby={describedBy(id(field), !!hint, p(field))}
        onInput={(e) => update({ [field]: e.currentTarget.value })}
        {...extra}
      />
    </Field>
  );
  const area = (field: "args" | "env" | "headers", label: Key, hint: Key) => (
    <Field id={id(field)} label={t(label)} hint={t(hint)} problem={p(field)}>
      <textarea
        id={id(field)}
        class="code"
        rows={3}
        spellcheck={false}
        value={form[field]}
        aria-invalid={p(field) ? true : undefined}
        aria-describedby={describedBy(id(field), true, p(field))}
        onInput={(e) => update({ [field]: e.currentTarget.value })}
      />
    </Field>
  );

  return (
    <form
      class="settings-form mcp-form"
      onSubmit={submit}
      noValidate
      aria-label={server ? t("mcp.editNamed", { name: server.name }) : t("mcp.add")}
    >
      {p("form") && <FieldError id={`${prefix}-form-error`} problem={p("form")} />}
      {!server && input("name", "mcp.name", "mcp.nameHint", { maxLength: 32, required: true })}
      <Field id={id("transport")} label={t("mcp.transport")}>
        <select
          id={id("transport")}
          value={form.transport}
          onChange={(e) => update({ transport: e.currentTarget.value as Transport })}
        >
          <option value="stdio">{t("mcp.transportStdio")}</option>
          <option value="http">{t("mcp.transportHttp")}</option>
          <option value="sse">{t("mcp.transportSse")}</option>
        </select>
      </Field>
      {form.transport === "stdio" ? (
        <>
          {input("command", "mcp.command", "mcp.commandHint")}
          {area("args", "mcp.args", "mcp.argsHint")}
          {area("env", "mcp.env", "mcp.envHint")}
          {input("cwd", "mcp.cwd")}
        </>
      ) : (
        <>
          {input("url", "mcp.url", undefined, { type: "url", inputMode: "url" })}
          {area("headers", "mcp.headers", "mcp.headersHint")}
          {input("bearer_token", "mcp.bearerToken", "mcp.bearerTokenHint", { type: "password", autoComplete: "off" })}
        </>
      )}
      {input("timeout", "mcp.timeoutLabel", undefined, { type: "number", min: 1, max: 300, step: 1, inputMode: "decimal" })}
      <Switch id={id("enabled")} label={t("mcp.enabledLabel")} checked={form.enabled} onChange={(enabled) => update({ enabled })} />
      <div class="form-actions">
        <button type="submit" class="primary" disabled={busy}>
          {server ? t("common.save") : t("mcp.addButton")}
        </button>
        <button type="button" onClick={onCancel}>
          {t("common.cancel")}
        </button>
      </div>
    </form>
  );
}
