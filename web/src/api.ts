// Every request the page makes goes through Parley's public HTTP API, with the session
// cookie (same origin). Errors are the OpenAI error object; they become ApiError, whose
// message is what a person reads.

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

type Json = Record<string, unknown>;

async function errorFrom(response: Response): Promise<ApiError> {
  let message = `${response.status} ${response.statusText}`;
  let code: string | null = null;
  let param: string | null = null;
  try {
    const body = (await response.json()) as { error?: { message?: string; code?: string; param?: string } };
    if (body.error?.message) message = body.error.message;
    code = body.error?.code ?? null;
    param = body.error?.param ?? null;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(message, response.status, code, param);
}

export interface RequestOptions {
  method?: string;
  body?: unknown;
  signal?: AbortSignal;
  query?: Record<string, string | number | boolean | undefined | null>;
}

export function url(path: string, query?: RequestOptions["query"]): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

export async function send(path: string, options: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { Accept: "application/json" };
  let body: BodyInit | undefined;
  if (options.body instanceof FormData) {
    body = options.body;
  } else if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  const response = await fetch(url(path, options.query), {
    method: options.method ?? (body === undefined ? "GET" : "POST"),
    headers,
    body,
    credentials: "same-origin",
    signal: options.signal,
  });
  if (!response.ok) {
    const error = await errorFrom(response);
    // The session ended (signed out elsewhere, key revoked, expired): the app shows sign-in.
    if (response.status === 401) dispatchEvent(new CustomEvent("parley:unauthorized"));
    throw error;
  }
  return response;
}

export async function api<T = Json>(path: string, options: RequestOptions = {}): Promise<T> {
  const response = await send(path, options);
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

/** Server-sent events of a chat-completions stream: each `data:` payload parsed, until
 * `[DONE]`. A mid-stream failure arrives as `data: {"error": ...}` and is thrown. */
export async function* events<T = Json>(response: Response): AsyncGenerator<T, void, undefined> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const parsed = JSON.parse(data) as T & { error?: { message?: string; code?: string } };
      if (parsed.error) {
        throw new ApiError(parsed.error.message ?? "the reply failed", 0, parsed.error.code ?? null);
      }
      yield parsed as T;
    }
  }
}

export async function stream<T = Json>(
  path: string,
  body: Json,
  signal?: AbortSignal,
): Promise<AsyncGenerator<T>> {
  const response = await send(path, {
    method: "POST",
    body: { ...body, stream: true, stream_options: { include_usage: true } },
    signal,
  });
  return events<T>(response);
}
