import { describe, expect, it } from "vitest";
import { emptyMcpForm, fromConfig, mcpFieldOf, mcpPatch, parsePairs, toMcpPayload } from "./mcpForm";
import type { McpConfig } from "./types";

const stdio: McpConfig = {
  transport: "stdio",
  command: "npx",
  args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/my files"],
  cwd: null,
  env: { API_TOKEN: "***", MODE: "***" },
  url: null,
  headers: {},
  bearer_token: null,
  bearer_token_env: null,
  timeout: 30,
  enabled: true,
};

describe("MCP server form -> JSON", () => {
  it("makes a stdio server body with one argument a line and NAME=value env", () => {
    const { payload, errors } = toMcpPayload({
      ...emptyMcpForm(),
      name: "files",
      command: " npx ",
      args: "-y\n@modelcontextprotocol/server-filesystem\n\n/srv/my files",
      env: "TOKEN=abc=def\nMODE = fast",
      timeout: "45",
    });
    expect(errors).toEqual({});
    expect(payload).toEqual({
      name: "files",
      transport: "stdio",
      enabled: true,
      command: "npx",
      args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/my files"],
      env: { TOKEN: "abc=def", MODE: "fast" },
      timeout: 45,
    });
  });

  it("makes an http server body with headers and a token", () => {
    const { payload, errors } = toMcpPayload({
      ...emptyMcpForm(),
      name: "github",
      transport: "http",
      url: "https://api.example.com/mcp/",
      headers: "X-Team: blue\nAccept: application/json",
      bearer_token: "secret",
      enabled: false,
    });
    expect(errors).toEqual({});
    expect(payload).toEqual({
      name: "github",
      transport: "http",
      enabled: false,
      url: "https://api.example.com/mcp/",
      headers: { "X-Team": "blue", Accept: "application/json" },
      bearer_token: "secret",
      timeout: 30,
    });
  });

  it("names the bad fields", () => {
    const { errors } = toMcpPayload({ ...emptyMcpForm(), name: "bad__name", env: "OK=1\nnot a pair", timeout: "900" });
    expect(errors.name?.key).toBe("mcp.err.name");
    expect(errors.command?.key).toBe("mcp.err.command");
    expect(errors.env).toEqual({ key: "mcp.err.envLine", vars: { n: 2 } });
    expect(errors.timeout?.key).toBe("mcp.err.timeout");
    const http = toMcpPayload({ ...emptyMcpForm(), name: "x", transport: "sse", url: "ftp://x", headers: ": v" });
    expect(http.errors.url?.key).toBe("mcp.err.url");
    expect(http.errors.headers).toEqual({ key: "mcp.err.headerLine", vars: { n: 1 } });
  });

  it("parses pairs at the first separator only", () => {
    expect(parsePairs("A=b=c\n\n B = d ", "=")).toEqual({ pairs: { A: "b=c", B: "d" }, bad: null });
    expect(parsePairs("Authorization: Bearer x:y", ":")).toEqual({ pairs: { Authorization: "Bearer x:y" }, bad: null });
  });
});

describe("MCP server edits -> PATCH", () => {
  it("sends nothing when nothing changed, masked secrets included", () => {
    const form = fromConfig("files", stdio);
    expect(form.env).toBe("API_TOKEN=***\nMODE=***");
    expect(mcpPatch("files", stdio, form)).toEqual({});
  });

  it("sends only the changed fields", () => {
    const form = { ...fromConfig("files", stdio), enabled: false, timeout: "60" };
    expect(mcpPatch("files", stdio, form)).toEqual({ enabled: false, timeout: 60 });
  });

  it("resets what the new transport does not use to its default with null", () => {
    const form = { ...fromConfig("files", stdio), transport: "http" as const, url: "https://mcp.example.com" };
    expect(mcpPatch("files", stdio, form)).toEqual({
      transport: "http",
      url: "https://mcp.example.com",
      headers: {},
      command: null,
      args: null,
      env: null,
    });
  });

  it("removes a stored bearer token when its field is emptied", () => {
    const http: McpConfig = { ...stdio, transport: "http", command: null, args: [], env: {}, url: "https://x.example", bearer_token: "***" };
    const form = fromConfig("x", http);
    expect(mcpPatch("x", http, form)).toEqual({});
    expect(mcpPatch("x", http, { ...form, bearer_token: "" })).toEqual({ bearer_token: null });
  });

  it("maps the server's param to a field", () => {
    expect(mcpFieldOf("env.NODE_OPTIONS")).toBe("env");
    expect(mcpFieldOf("command")).toBe("command");
    expect(mcpFieldOf("bearer_token_env")).toBe("form");
    expect(mcpFieldOf(null)).toBe("form");
  });
});
