// Who the page acts as: GET /v1/session says whether a key is needed and whose session
// the cookie is. Signing in exchanges a pasted key for an HttpOnly cookie; the key itself
// is never stored by the page.
import { signal } from "@preact/signals";
import { api } from "./api";
import type { Session } from "./types";

export const session = signal<Session | null>(null);

export async function loadSession(): Promise<Session> {
  const value = await api<Session>("/v1/session");
  session.value = value;
  return value;
}

export async function signIn(apiKey: string): Promise<Session> {
  const value = await api<Session>("/v1/session", { method: "POST", body: { api_key: apiKey } });
  session.value = value;
  return value;
}

export async function signOut(): Promise<void> {
  const value = await api<Session>("/v1/session", { method: "DELETE" });
  session.value = value;
}
