// The MCP server form and its JSON (src/parley/api/mcp.py, mcp/settings.py): a stdio
// command with its arguments and environment, or a URL with headers and a token.
// Secrets come back masked (`***`); sent back as they are, the server keeps the stored ones.
import type { McpConfig } from "./types";

export type Transport = "stdio" | "http" | "sse";

export interface McpForm {
  name: string;
  transport: Transport;
  command: string;
  /** one argument a line */
  args: string;
  /** NAME=value, one a line */
  env: string;
  cwd: string;
  url: string;
  /** Name: value, one a line */
  headers: string;
  bearer_token: string;
  timeout: string;
  enabled: boolean;
}

export type McpProblemKey =
  | "mcp.err.name"
  | "mcp.err.command"
  | "mcp.err.url"
  | "mcp.err.envLine"
  | "mcp.err.headerLine"
  | "mcp.err.timeout";
export type McpErrors = Partial<Record<keyof McpForm | "form", { key: McpProblemKey; vars?: Record<string, string | number> }>>;

export interface McpPayload {
  name?: string;
  transport: Transport;
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  url?: string;
  headers?: Record<string, string>;
  bearer_token?: string;
  timeout?: number;
  enabled: boolean;
}

export const SERVER_NAME = /^(?!.*__)(?!.*_$)[A-Za-z0-9][A-Za-z0-9_-]{0,31}$/;

export function emptyMcpForm(): McpForm {
  return {
    name: "",
    transport: "stdio",
    command: "",
    args: "",
    env: "",
    cwd: "",
    url: "",
    headers: "",
    bearer_token: "",
    timeout: "30",
    enabled: true,
  };
}

/** A server's listed `config` (admins) -> the form. */
export function fromConfig(name: string, config: McpConfig): McpForm {
  return {
    name,
    transport: config.transport,
    command: config.command ?? "",
    args: (config.args ?? []).join("\n"),
    env: Object.entries(config.env ?? {})
      .map(([key, value]) => `${key}=${value}`)
      .join("\n"),
    cwd: config.cwd ?? "",
    url: config.url ?? "",
    headers: Object.entries(config.headers ?? {})
      .map(([key, value]) => `${key}: ${value}`)
      .join("\n"),
    bearer_token: config.bearer_token ?? "",
    timeout: String(config.timeout ?? 30),
    enabled: config.enabled ?? true,
  };
}

function lines(text: string): { line: string; n: number }[] {
  return text
    .split("\n")
    .map((line, index) => ({ line: line.trim(), n: index + 1 }))
    .filter(({ line }) => line.length > 0);
}

/** `NAME=value` lines -> an object, or the number of the first line that is not one. */
export function parsePairs(text: string, separator: "=" | ":"): { pairs: Record<string, string>; bad: number | null } {
  const pairs: Record<string, string> = {};
  for (const { line, n } of lines(text)) {
    const at = line.indexOf(separator);
    const key = at > 0 ? line.slice(0, at).trim() : "";
    if (!key) return { pairs, bad: n };
    pairs[key] = line.slice(at + 1).trim();
  }
  return { pairs, bad: null };
}

/** The form -> the body of POST /v1/mcp/servers (without `name` when `withName` is false). */
export function toMcpPayload(form: McpForm, withName = true): { payload: McpPayload; errors: McpErrors } {
  const errors: McpErrors = {};
  const payload: McpPayload = { transport: form.transport, enabled: form.enabled };
  if (withName) {
    const name = form.name.trim();
    if (!SERVER_NAME.test(name)) errors.name = { key: "mcp.err.name" };
    payload.name = name;
  }
  if (form.transport === "stdio") {
    const command = form.command.trim();
    if (!command) errors.command = { key: "mcp.err.command" };
    payload.command = command;
    payload.args = form.args.split("\n").map((arg) => arg.trim()).filter(Boolean);
    const env = parsePairs(form.env, "=");
    if (env.bad !== null) errors.env = { key: "mcp.err.envLine", vars: { n: env.bad } };
    payload.env = env.pairs;
    if (form.cwd.trim()) payload.cwd = form.cwd.trim();
  } else {
    const url = form.url.trim();
    if (!/^https?:\/\/\S+$/i.test(url)) errors.url = { key: "mcp.err.url" };
    payload.url = url;
    const headers = parsePairs(form.headers, ":");
    if (headers.bad !== null) errors.headers = { key: "mcp.err.headerLine", vars: { n: headers.bad } };
    payload.headers = headers.pairs;
    if (form.bearer_token.trim()) payload.bearer_token = form.bearer_token.trim();
  }
  const timeout = form.timeout.trim();
  if (timeout) {
    const value = Number(timeout);
    if (!Number.isFinite(value) || value < 1 || value > 300) errors.timeout = { key: "mcp.err.timeout" };
    else payload.timeout = value;
  }
  return { payload, errors };
}

/** The PATCH body: what changed from the listed config; a field the form no longer sends
 * (a stdio server's `command` once it is http) is sent as null, its default. */
export function mcpPatch(name: string, config: McpConfig, form: McpForm): Record<string, unknown> {
  const before = toMcpPayload(fromConfig(name, config), false).payload as unknown as Record<string, unknown>;
  const next = toMcpPayload(form, false).payload as unknown as Record<string, unknown>;
  const patch: Record<string, unknown> = {};
  for (const key of new Set([...Object.keys(before), ...Object.keys(next)])) {
    if (!(key in next)) patch[key] = null;
    else if (JSON.stringify(next[key]) !== JSON.stringify(before[key])) patch[key] = next[key];
  }
  return patch;
}

/** The server's `param` (`command`, `env.NODE_OPTIONS`, `url`) -> the form field. */
export function mcpFieldOf(param: string | null | undefined): keyof McpForm | "form" {
  const head = (param ?? "").split(".")[0];
  const fields: (keyof McpForm)[] = ["name", "transport", "command", "args", "env", "cwd", "url", "headers", "bearer_token", "timeout", "enabled"];
  return (fields as string[]).includes(head) ? (head as keyof McpForm) : "form";
}
