import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { conversations } from "../../conversations";
import { setLang } from "../../i18n";
import { route } from "../../router";
import type { ConversationDetail, StoredMessage } from "../../types";
import { ChatView } from "./ChatView";

interface Seen {
  method: string;
  path: string;
  body: Record<string, unknown> | undefined;
  signal: AbortSignal | undefined;
}

type Answer = Response | Promise<Response>;
type Routes = Record<string, (request: Seen) => Answer>;

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

/** An SSE response of `chunks` (then [DONE]); `hold` keeps it open until aborted. */
function sse(chunks: object[], signal?: AbortSignal, hold = false): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(`data: ${JSON.stringify(chunk)}\n\n`));
      if (!hold) {
        controller.enqueue(encoder.encode("data: [DONE]\n\n"));
        controller.close();
      } else {
        signal?.addEventListener("abort", () => controller.error(new DOMException("aborted", "AbortError")));
      }
    },
  });
  return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
}

function chunk(conversation: string, delta: object, extra: object = {}, finish: string | null = null) {
  return {
    id: "chatcmpl-x",
    model: "mock-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
    parley: { conversation_id: conversation, message_id: "msg_a" },
    ...extra,
  };
}

function message(overrides: Partial<StoredMessage>): StoredMessage {
  return {
    id: "msg_u", object: "conversation.message", parent_id: null, role: "user", content: "hi",
    parts: [{ kind: "text", text: "hi" }], status: "complete", model: null, usage: null,
    finish_reason: null, error: null, created_at: 1, updated_at: 1,
    versions: { count: 1, index: 0, ids: [overrides.id ?? "msg_u"] },
    ...overrides,
  };
}

function detail(id: string, messages: StoredMessage[], extra: Partial<ConversationDetail> = {}): ConversationDetail {
  return { id, object: "conversation", title: "A chat", created_at: 1, updated_at: 2, messages, suggestions: [], ...extra };
}

function fake(routes: Routes) {
  const seen: Seen[] = [];
  const fetch = vi.fn(async (input: string, init: RequestInit = {}) => {
    const target = new URL(input, "http://parley.test");
    const method = (init.method ?? "GET").toUpperCase();
    const request: Seen = {
      method,
      path: target.pathname,
      body: typeof init.body === "string" ? JSON.parse(init.body) : undefined,
      signal: init.signal ?? undefined,
    };
    seen.push(request);
    const handler = routes[`${method} ${target.pathname}`];
    if (handler) return handler(request);
    if (method === "GET" && /^\/v1\/(models|assistants|knowledge_bases)$/.test(target.pathname)) {
      return json({ object: "list", data: [], has_more: false });
    }
    return json({ error: { message: `no route ${method} ${target.pathname}` } }, 404);
  });
  vi.stubGlobal("fetch", fetch);
  return { seen, find: (method: string, path: string) => seen.filter((r) => r.method === method && r.path === path) };
}

beforeEach(() => {
  setLang("en");
  localStorage.clear();
  conversations.value = [];
  history.replaceState(null, "", "/");
  route.value = { name: "chat", id: null };
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("ChatView", () => {
  it("a new chat starts a named conversation, follows its id, and shows what the server stored", async () => {
    const stored = detail("conv_new", [
      message({ id: "msg_u", content: "Hello", parts: [{ kind: "text", text: "Hello" }] }),
      message({
        id: "msg_a", role: "assistant", content: "Hi there", parts: [{ kind: "text", text: "Hi there" }],
        model: "mock-model", usage: { input_tokens: 11, output_tokens: 3, response_usd: 0.0123, complete: true },
      }),
    ], { title: "Greetings", suggestions: ["Tell me more"] });
    const api = fake({
      "POST /v1/conversations": () => json({ id: "conv_new", object: "conversation", title: null }, 201),
      "POST /v1/chat/completions": (r) =>
        sse(
          [
            chunk("conv_new", { role: "assistant", content: "" }),
            chunk("conv_new", { content: "Hi " }),
            chunk("conv_new", { content: "there" }),
            chunk("conv_new", {}, { parley: { conversation_id: "conv_new", message_id: "msg_a", cost: { response_usd: 0.0123, conversation_usd: 0.0123, complete: true } } }, "stop"),
          ],
          r.signal,
        ),
      "GET /v1/conversations/conv_new": () => json(stored),
    });
    render(<ChatView conversationId={null} />);
    expect(screen.getByRole("heading", { name: "New chat" })).toBeTruthy();
    const box = screen.getByLabelText("Message");
    fireEvent.input(box, { target: { value: "Hello" } });
    fireEvent.keyDown(box, { key: "Enter" });

    await screen.findByText("Reply finished");
    expect(api.find("POST", "/v1/conversations")).toHaveLength(1);
    const [start] = api.find("POST", "/v1/chat/completions");
    expect(start.body?.conversation_id).toBe("conv_new");
    expect(start.body?.messages).toEqual([{ role: "user", content: "Hello" }]);
    expect(start.body?.stream).toBe(true);
    expect(location.pathname).toBe("/c/conv_new");
    expect(route.value).toEqual({ name: "chat", id: "conv_new" });

    await screen.findByRole("heading", { name: "Greetings" });
    expect(conversations.value[0]).toMatchObject({ id: "conv_new", title: "Greetings" });
    expect(screen.getByText("Total $0.0123")).toBeTruthy();
    expect(screen.getByText(/11 in \/ 3 out tokens/)).toBeTruthy();
    expect(screen.getByRole("button", { name: "Tell me more" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Regenerate" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Edit" })).toBeTruthy();
  });

  it("continues a stored conversation by id with only the new message and the picks", async () => {
    localStorage.setItem("parley.chat.picks.conv_1", JSON.stringify({ model: "mock-large", knowledge_bases: ["kb_1"] }));
    const api = fake({
      "GET /v1/conversations/conv_1": () => json(detail("conv_1", [])),
      "GET /v1/knowledge_bases": () => json({ object: "list", data: [{ id: "kb_1", name: "Handbook" }], has_more: false }),
      "POST /v1/chat/completions": (r) => sse([chunk("conv_1", { content: "ok" })], r.signal),
    });
    render(<ChatView conversationId="conv_1" />);
    await screen.findByRole("heading", { name: "A chat" });
    await screen.findByRole("option", { name: "Handbook" });
    const box = screen.getByLabelText("Message");
    fireEvent.input(box, { target: { value: "Next" } });
    fireEvent.click(screen.getByRole("button", { name: "Send" }));
    await screen.findByText("Reply finished");
    const [sent] = api.find("POST", "/v1/chat/completions");
    expect(sent.body).toMatchObject({
      conversation_id: "conv_1",
      messages: [{ role: "user", content: "Next" }],
      model: "mock-large",
      knowledge_bases: ["kb_1"],
    });
  });

  it("a missing conversation says so", async () => {
    fake({
      "GET /v1/conversations/conv_gone": () => json({ error: { message: "conversation 'conv_gone' not found", code: "conversation_not_found" } }, 404),
    });
    render(<ChatView conversationId="conv_gone" />);
    expect(await screen.findByText("This conversation was not found. It may have been deleted.")).toBeTruthy();
  });

  it("collects a decision for every pending call, then resumes the reply with them", async () => {
    const paused = message({
      id: "msg_p", role: "assistant", status: "awaiting_approval", content: "",
      parts: [
        { kind: "tool_call", id: "call_1", name: "workspace_write", arguments: '{"path":"a"}', result: null, approval: "pending" },
        { kind: "tool_call", id: "call_2", name: "workspace_write", arguments: '{"path":"b"}', result: null, approval: "pending" },
      ],
    });
    const api = fake({
      "GET /v1/conversations/conv_1": () => json(detail("conv_1", [message({}), paused])),
      "POST /v1/conversations/conv_1/approvals": (r) => sse([chunk("conv_1", { content: "Written." })], r.signal),
    });
    render(<ChatView conversationId="conv_1" />);
    const cards = await screen.findAllByRole("article", { name: /workspace_write/ });
    expect(cards).toHaveLength(2);
    fireEvent.click(within(cards[0]).getByRole("button", { name: "Approve" }));
    expect(api.find("POST", "/v1/conversations/conv_1/approvals")).toHaveLength(0);
    fireEvent.click(within(cards[1]).getByRole("button", { name: "Deny" }));
    const reason = within(cards[1]).getByRole("textbox");
    fireEvent.input(reason, { target: { value: "not b" } });
    fireEvent.submit(reason.closest("form") ?? reason);
    await waitFor(() => expect(api.find("POST", "/v1/conversations/conv_1/approvals")).toHaveLength(1));
    const [decided] = api.find("POST", "/v1/conversations/conv_1/approvals");
    expect(decided.body).toMatchObject({
      stream: true,
      decisions: [
        { tool_call_id: "call_1", decision: "approve" },
        { tool_call_id: "call_2", decision: "deny", reason: "not b" },
      ],
    });
    await screen.findByText("Reply finished");
  });

  it("Stop cancels the reply on the server, stops reading, and shows what is stored", async () => {
    let reads = 0;
    const interrupted = message({
      id: "msg_a", role: "assistant", status: "interrupted", content: "Part",
      parts: [{ kind: "text", text: "Part" }], error: { message: "cancelled", code: "cancelled" },
    });
    const api = fake({
      "GET /v1/conversations/conv_1": () => json(detail("conv_1", reads++ ? [message({}), interrupted] : [message({})])),
      "POST /v1/chat/completions": (r) => sse([chunk("conv_1", { content: "Part" })], r.signal, true),
      "POST /v1/conversations/conv_1/cancel": () => json({ id: "conv_1", object: "conversation.cancellation", cancelled: true, message_id: "msg_a" }),
    });
    render(<ChatView conversationId="conv_1" />);
    await screen.findByRole("heading", { name: "A chat" });
    const box = screen.getByLabelText("Message");
    fireEvent.input(box, { target: { value: "Go on" } });
    fireEvent.keyDown(box, { key: "Enter" });
    const stop = await screen.findByRole("button", { name: "Stop" });
    fireEvent.click(stop);
    await screen.findByText("Reply stopped");
    expect(api.find("POST", "/v1/conversations/conv_1/cancel")).toHaveLength(1);
    expect(api.find("POST", "/v1/chat/completions")[0].signal?.aborted).toBe(true);
    expect(await screen.findByText("This reply was interrupted.")).toBeTruthy();
    expect(screen.getByRole("button", { name: "Retry" })).toBeTruthy();
  });

  it("moves between versions with select and shows the conversation it answers", async () => {
    const v1 = message({ id: "msg_a1", role: "assistant", content: "First", parts: [{ kind: "text", text: "First" }], versions: { count: 2, index: 1, ids: ["msg_a0", "msg_a1"] } });
    const v0 = message({ id: "msg_a0", role: "assistant", content: "Zeroth", parts: [{ kind: "text", text: "Zeroth" }], versions: { count: 2, index: 0, ids: ["msg_a0", "msg_a1"] } });
    const api = fake({
      "GET /v1/conversations/conv_1": () => json(detail("conv_1", [message({}), v1])),
      "POST /v1/conversations/conv_1/messages/msg_a0/select": () => json(detail("conv_1", [message({}), v0])),
    });
    render(<ChatView conversationId="conv_1" />);
    await screen.findByText("2/2");
    expect((screen.getByRole("button", { name: "Next version" }) as HTMLButtonElement).disabled).toBe(true);
    fireEvent.click(screen.getByRole("button", { name: "Previous version" }));
    await screen.findByText("1/2");
    expect(api.find("POST", "/v1/conversations/conv_1/messages/msg_a0/select")).toHaveLength(1);
  });
});
