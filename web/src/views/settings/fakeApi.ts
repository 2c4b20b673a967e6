// For the tests: a fake of Parley's API behind `fetch`, answering by method and path,
// and recording every request.
import { vi } from "vitest";

export interface Seen {
  method: string;
  path: string;
  query: URLSearchParams;
  body: unknown;
}

type Answer = object | string | number | boolean | null;
type Handler = (request: Seen) => Answer;

export function reply(status: number, body: unknown): { status: number; body: unknown } {
  return { status, body };
}

export function error(status: number, message: string, param: string | null = null) {
  return reply(status, { error: { message, type: "invalid_request_error", param, code: null } });
}

/** Routes as "GET /v1/assistants" -> an answer (or a function of the request). */
export function fakeApi(routes: Record<string, Handler | Answer>) {
  const seen: Seen[] = [];
  const fetch = vi.fn(async (input: string, init: RequestInit = {}) => {
    const target = new URL(input, "http://parley.test");
    const method = (init.method ?? "GET").toUpperCase();
    const request: Seen = {
      method,
      path: target.pathname,
      query: target.searchParams,
      body: typeof init.body === "string" ? JSON.parse(init.body) : undefined,
    };
    seen.push(request);
    const route = routes[`${method} ${target.pathname}`];
    if (route === undefined) {
      return new Response(JSON.stringify({ error: { message: `no route ${method} ${target.pathname}` } }), {
        status: 404,
        headers: { "Content-Type": "application/json" },
      });
    }
    const answer = typeof route === "function" ? (route as Handler)(request) : route;
    const shaped =
      answer && typeof answer === "object" && "status" in answer && "body" in answer
        ? (answer as { status: number; body: unknown })
        : { status: 200, body: answer };
    return new Response(JSON.stringify(shaped.body), {
      status: shaped.status,
      headers: { "Content-Type": "application/json" },
    });
  });
  vi.stubGlobal("fetch", fetch);
  return { seen, fetch, last: (method: string, path: string) => [...seen].reverse().find((r) => r.method === method && r.path === path) };
}

export function list<T>(data: T[]) {
  return { object: "list", data, has_more: false, first_id: null, last_id: null };
}

export const HOSTILE = `<img src=x onerror="window.__pwned=1">"><script>window.__pwned=2</script>`;
