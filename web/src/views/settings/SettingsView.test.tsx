import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { lang, setLang } from "../../i18n";
import { session } from "../../session";
import { theme } from "../../theme";
import type { Session } from "../../types";
import { error, fakeApi, HOSTILE, list } from "./fakeApi";
import { KeysSection } from "./KeysSection";
import { McpSection, serverStatus } from "./McpSection";
import { SettingsView } from "./SettingsView";
import type { McpServer, UsageReport } from "./types";
import { formatCost } from "./UsageSection";

const admin: Session = {
  object: "session",
  keys_required: true,
  signed_in: true,
  owner: "alice",
  key_id: "key_me",
  key_name: "laptop",
  admin: true,
};

function server(overrides: Partial<McpServer> = {}): McpServer {
  return {
    name: "files",
    object: "mcp.server",
    source: "api",
    transport: "stdio",
    enabled: true,
    connected: false,
    tool_count: null,
    latency_ms: null,
    quarantined_for_seconds: null,
    consecutive_failures: 0,
    skipped_tools: [],
    created_at: 1,
    last_error: null,
    refused: null,
    config: {
      transport: "stdio",
      command: "npx",
      args: ["-y", "server-files"],
      cwd: null,
      env: {},
      url: null,
      headers: {},
      bearer_token: null,
      bearer_token_env: null,
      timeout: 30,
      enabled: true,
    },
    ...overrides,
  };
}

const usage: UsageReport = {
  object: "usage",
  key_id: "key_me",
  key_name: "laptop",
  limits_enabled: true,
  day: { period: "2025-01-02", tokens: 12345, cost_usd: 0.0042, calls: 7, limit_tokens: 100000, limit_cost_usd: null, resets_at: "2025-01-03T00:00:00Z" },
  month: { period: "2025-01", tokens: 90000, cost_usd: 1.5, calls: 70, limit_tokens: 100000, limit_cost_usd: 2, resets_at: "2025-02-01T00:00:00Z" },
};

beforeEach(() => {
  setLang("en");
  session.value = admin;
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  session.value = null;
});

describe("MCP servers", () => {
  it("says how a server is doing", () => {
    expect(serverStatus(server({ connected: true })).text).toBe("Connected");
    expect(serverStatus(server({ enabled: false })).text).toBe("Disabled");
    expect(serverStatus(server({ quarantined_for_seconds: 41.2 })).text).toBe("Paused after failures (42 s left)");
    expect(serverStatus(server({ consecutive_failures: 2 })).text).toBe("Failing (2 in a row)");
    expect(serverStatus(server({ refused: "not allowed" })).tone).toBe("bad");
    expect(serverStatus(server()).text).toBe("Not connected yet");
  });

  it("shows errors, refusals and tool descriptions as text", async () => {
    fakeApi({
      "GET /v1/mcp/servers": list([
        server({ last_error: HOSTILE, refused: `<a href="javascript:alert(1)">x</a>`, skipped_tools: [{ name: "<b>t</b>", reason: "<i>bad</i>" }] }),
      ]),
      "GET /v1/mcp/servers/files/tools": list([{ name: "mcp__files__read", object: "mcp.tool", tool: "read", description: HOSTILE }]),
    });
    const { container } = render(<McpSection />);
    await screen.findByText(HOSTILE, { selector: ".pre" });
    fireEvent.click(screen.getByRole("button", { name: "Show tools of files" }));
    await screen.findByText("mcp__files__read");
    expect(screen.getByRole("button", { name: "Hide tools of files" }).getAttribute("aria-expanded")).toBe("true");
    expect(container.querySelector("img, script, a, b, i")).toBeNull();
    expect(container.textContent).toContain(`<a href="javascript:alert(1)">x</a>`);
  });

  it("lets an admin add a stdio server and shows a refusal beside its field", async () => {
    let calls = 0;
    const api = fakeApi({
      "GET /v1/mcp/servers": list([]),
      "POST /v1/mcp/servers": (r) => {
        calls++;
        if (calls === 1) return error(403, "env may not set 'NODE_OPTIONS'", "env.NODE_OPTIONS");
        return server({ name: (r.body as { name: string }).name });
      },
    });
    render(<McpSection />);
    fireEvent.click(await screen.findByRole("button", { name: /Add MCP server/ }));
    fireEvent.input(screen.getByLabelText("Server name"), { target: { value: "docs" } });
    fireEvent.input(screen.getByLabelText("Command"), { target: { value: "npx" } });
    fireEvent.input(screen.getByLabelText("Arguments"), { target: { value: "-y\nserver-docs" } });
    const env = screen.getByLabelText("Environment");
    fireEvent.input(env, { target: { value: "NODE_OPTIONS=--require x" } });
    fireEvent.click(screen.getByRole("button", { name: "Add server" }));
    await waitFor(() => expect(env.getAttribute("aria-invalid")).toBe("true"));
    expect(screen.getByText("env may not set 'NODE_OPTIONS'")).toBeTruthy();

    fireEvent.input(env, { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Add server" }));
    await screen.findByRole("heading", { name: /docs/ });
    expect(api.last("POST", "/v1/mcp/servers")?.body).toEqual({
      name: "docs",
      transport: "stdio",
      enabled: true,
      command: "npx",
      args: ["-y", "server-docs"],
      env: {},
      timeout: 30,
    });
  });

  it("edits with a PATCH of the changes and removes after confirmation", async () => {
    const api = fakeApi({
      "GET /v1/mcp/servers": list([server(), server({ name: "cfg", source: "config" })]),
      "PATCH /v1/mcp/servers/files": server({ enabled: false }),
      "DELETE /v1/mcp/servers/files": { id: "files", object: "mcp.server.deleted", deleted: true },
    });
    render(<McpSection />);
    fireEvent.click(await screen.findByRole("button", { name: "Edit MCP server files" }));
    expect(screen.queryByRole("button", { name: "Edit MCP server cfg" })).toBeNull();
    const form = screen.getByRole("form", { name: "Edit MCP server files" });
    fireEvent.click(within(form).getByLabelText("Enabled"));
    fireEvent.click(within(form).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(api.last("PATCH", "/v1/mcp/servers/files")?.body).toEqual({ enabled: false }));

    fireEvent.click(screen.getByRole("button", { name: "Remove MCP server files" }));
    fireEvent.click(within(screen.getByRole("dialog")).getByRole("button", { name: "Remove" }));
    await waitFor(() => expect(screen.queryByRole("heading", { name: /^files/ })).toBeNull());
    expect(api.last("DELETE", "/v1/mcp/servers/files")).toBeTruthy();
  });

  it("offers no changes to a caller who is not an admin", async () => {
    session.value = { ...admin, admin: false };
    fakeApi({ "GET /v1/mcp/servers": list([server({ config: undefined })]) });
    render(<McpSection />);
    await screen.findByRole("heading", { name: /files/ });
    expect(screen.queryByRole("button", { name: /Add MCP server/ })).toBeNull();
    expect(screen.queryByRole("button", { name: "Remove MCP server files" })).toBeNull();
  });
});

describe("API keys", () => {
  it("shows a new key once with a warning and a Copy button", async () => {
    const writeText = vi.fn(async () => undefined);
    Object.defineProperty(navigator, "clipboard", { value: { writeText }, configurable: true });
    const api = fakeApi({
      "GET /v1/keys": list([{ id: "key_me", name: "laptop", owner: "alice", prefix: "sk-parley-AbC", admin: true, created_at: 1 }]),
      "POST /v1/keys": { id: "key_2", name: "ci", owner: "alice", prefix: "sk-parley-XyZ", admin: false, created_at: 2, key: "sk-parley-XyZsecret" },
    });
    render(<KeysSection />);
    await screen.findByText("this browser");
    fireEvent.input(screen.getByLabelText("Key name"), { target: { value: "ci" } });
    fireEvent.click(screen.getByRole("button", { name: "Create key" }));
    const field = (await screen.findByLabelText("New API key")) as HTMLInputElement;
    expect(field.value).toBe("sk-parley-XyZsecret");
    expect(screen.getByText("Copy this key now: it will not be shown again.")).toBeTruthy();
    expect(api.last("POST", "/v1/keys")?.body).toEqual({ name: "ci", admin: false });
    fireEvent.click(screen.getByRole("button", { name: "Copy key" }));
    await screen.findByText("Copied");
    expect(writeText).toHaveBeenCalledWith("sk-parley-XyZsecret");
    fireEvent.click(screen.getByRole("button", { name: "I have copied it" }));
    expect(screen.queryByLabelText("New API key")).toBeNull();
    expect(document.body.textContent).not.toContain("sk-parley-XyZsecret");
    expect(screen.getByRole("button", { name: "Revoke key ci" })).toBeTruthy();
  });

  it("makes the first key an admin key, after a warning, and signs this browser in with it", async () => {
    session.value = { ...admin, keys_required: false, key_id: null, key_name: null, owner: "local" };
    const signedIn = { ...admin, key_id: "key_1", key_name: "first", owner: "local" };
    const api = fakeApi({
      "GET /v1/keys": list([]),
      "POST /v1/keys": { id: "key_1", name: "first", owner: "local", prefix: "sk-parley-Fst", admin: true, created_at: 2, key: "sk-parley-Fstsecret" },
      "POST /v1/session": signedIn,
      "GET /v1/session": signedIn,
    });
    render(<KeysSection />);
    const adminBox = (await screen.findByLabelText("Admin")) as HTMLInputElement;
    expect(adminBox.checked).toBe(true);
    expect(adminBox.disabled).toBe(true);
    fireEvent.input(screen.getByLabelText("Key name"), { target: { value: "first" } });
    fireEvent.click(screen.getByRole("button", { name: "Create key" }));
    const dialog = screen.getByRole("dialog");
    expect(dialog.textContent).toContain("every client needs a key");
    expect(api.last("POST", "/v1/keys")).toBeUndefined();
    fireEvent.click(within(dialog).getByRole("button", { name: "Create key" }));
    await waitFor(() => expect(session.value?.key_id).toBe("key_1"));
    expect(api.last("POST", "/v1/keys")?.body).toEqual({ name: "first", admin: true });
    expect(api.last("POST", "/v1/session")?.body).toEqual({ api_key: "sk-parley-Fstsecret" });
    expect(((await screen.findByLabelText("New API key")) as HTMLInputElement).value).toBe("sk-parley-Fstsecret");
    // the key survives the screen being rebuilt around the new session
    cleanup();
    render(<KeysSection />);
    expect(((await screen.findByLabelText("New API key")) as HTMLInputElement).value).toBe("sk-parley-Fstsecret");
    fireEvent.click(screen.getByRole("button", { name: "I have copied it" }));
    expect(screen.queryByLabelText("New API key")).toBeNull();
  });

  it("revoking the last key says the server goes back to keyless use, and asks who this browser is now", async () => {
    const api = fakeApi({
      "GET /v1/keys": list([{ id: "key_me", name: "laptop", admin: true, created_at: 1 }]),
      "DELETE /v1/keys/key_me": { id: "key_me", name: "laptop", revoked_at: 5 },
      "GET /v1/session": { ...admin, keys_required: false, key_id: null, key_name: null, owner: "local" },
    });
    render(<KeysSection />);
    fireEvent.click(await screen.findByRole("button", { name: "Revoke key laptop" }));
    const dialog = screen.getByRole("dialog");
    expect(dialog.textContent).toContain("the last active key");
    fireEvent.click(within(dialog).getByRole("button", { name: "Revoke" }));
    await waitFor(() => expect(session.value?.keys_required).toBe(false));
    expect(api.last("GET", "/v1/session")).toBeTruthy();
    expect(screen.queryByRole("button", { name: "Revoke key laptop" })).toBeNull();
  });

  it("revoking the key this browser uses signs it out", async () => {
    const api = fakeApi({
      "GET /v1/keys": list([
        { id: "key_me", name: "laptop", admin: true, created_at: 1 },
        { id: "key_2", name: "ci", admin: false, created_at: 2 },
      ]),
      "DELETE /v1/keys/key_me": { id: "key_me", name: "laptop", revoked_at: 5 },
      "GET /v1/session": { ...admin, signed_in: false, key_id: null, key_name: null },
    });
    render(<KeysSection />);
    fireEvent.click(await screen.findByRole("button", { name: "Revoke key laptop" }));
    const dialog = screen.getByRole("dialog");
    expect(dialog.textContent).toContain("You will be signed out");
    fireEvent.click(within(dialog).getByRole("button", { name: "Revoke" }));
    await waitFor(() => expect(session.value?.signed_in).toBe(false));
    expect(api.last("DELETE", "/v1/keys/key_me")).toBeTruthy();
  });
});

describe("SettingsView", () => {
  it("shows usage with limits, the account, and switches theme and language", async () => {
    fakeApi({
      "GET /v1/usage": usage,
      "GET /v1/mcp/servers": list([]),
      "GET /v1/keys": list([]),
    });
    render(<SettingsView />);
    await screen.findByText("12,345 of 100,000 (12%)");
    expect(screen.getByText("90,000 of 100,000 (90%)")).toBeTruthy();
    expect(screen.getByText("$1.50 of $2.00 (75%)")).toBeTruthy();
    expect(screen.getByText("$0.0042")).toBeTruthy();
    expect(screen.getByText("API key “laptop”")).toBeTruthy();
    expect(screen.getByRole("link", { name: "Connect a client" }).getAttribute("href")).toBe("/connect");
    expect(screen.getByRole("heading", { name: "API keys" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Sign out" })).toBeTruthy();

    fireEvent.change(screen.getByLabelText("Theme"), { target: { value: "dark" } });
    expect(theme.value).toBe("dark");
    expect(document.documentElement.dataset.theme).toBe("dark");
    fireEvent.change(screen.getByLabelText("Language"), { target: { value: "zh" } });
    expect(lang.value).toBe("zh");
    await screen.findByRole("heading", { name: "设置" });
    fireEvent.change(screen.getByLabelText("主题"), { target: { value: "system" } });
    expect(document.documentElement.dataset.theme).toBeUndefined();
  });

  it("hides API keys from a caller who is not an admin, and says when access is local", async () => {
    session.value = { ...admin, admin: false, keys_required: false, key_id: null, key_name: null, owner: "local" };
    fakeApi({ "GET /v1/usage": { ...usage, limits_enabled: false, key_name: null }, "GET /v1/mcp/servers": list([]) });
    render(<SettingsView />);
    await screen.findByText(/Usage limits are off/);
    expect(screen.queryByRole("heading", { name: "API keys" })).toBeNull();
    expect(screen.getByText("Local access (no API keys yet)")).toBeTruthy();
    expect(screen.queryByRole("button", { name: "Sign out" })).toBeNull();
  });

  it("formats costs readably", () => {
    expect(formatCost(0)).toBe("$0.00");
    expect(formatCost(0.00123)).toBe("$0.0012");
    expect(formatCost(0.5)).toBe("$0.500");
    expect(formatCost(12.345)).toBe("$12.35");
  });
});
