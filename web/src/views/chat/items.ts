// What the message list shows: the stored branch, and while a reply runs, the reply
// where it will be stored (after a new message, in place of a reply being redone or
// resumed, or after an edited message, whose old continuation is then out of the branch).
import type { StoredMessage } from "../../types";
import type { Attachment } from "./attachments";

/** A message the person just sent, shown until the conversation is read again. */
export interface UserDraft {
  text: string;
  attachments: Attachment[];
}

export type Placement =
  | { kind: "append"; user: UserDraft | null }
  | { kind: "replace"; messageId: string }
  | { kind: "edit"; messageId: string; user: UserDraft };

export type Item =
  | { kind: "message"; key: string; message: StoredMessage }
  | { kind: "draft"; key: string; user: UserDraft }
  | { kind: "live"; key: string };

const LIVE: Item = { kind: "live", key: "live" };

function stored(messages: readonly StoredMessage[]): Item[] {
  const items: Item[] = [];
  for (const message of messages) {
    if (message.role === "user" || message.role === "assistant") {
      items.push({ kind: "message", key: message.id, message });
    }
  }
  return items;
}

function draft(user: UserDraft): Item {
  return { kind: "draft", key: "draft", user };
}

export function listItems(messages: readonly StoredMessage[], placement: Placement | null): Item[] {
  const items = stored(messages);
  if (!placement) return items;
  if (placement.kind === "append") {
    if (placement.user) items.push(draft(placement.user));
    items.push(LIVE);
    return items;
  }
  const at = items.findIndex((item) => item.kind === "message" && item.message.id === placement.messageId);
  if (placement.kind === "replace") {
    if (at < 0) items.push(LIVE);
    else items[at] = LIVE;
    return items;
  }
  const before = at < 0 ? items : items.slice(0, at);
  return [...before, draft(placement.user), LIVE];
}
