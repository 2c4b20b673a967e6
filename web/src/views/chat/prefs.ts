// The model, assistant and knowledge bases picked for a conversation, kept in this
// browser: the API takes them per turn (README: `knowledge_bases` is "for this turn", and
// a conversation keeps its assistant but does not say which it is), so the page remembers
// them per conversation and sends them with every turn. A new chat starts from the last
// picks made in one.
import type { TurnOptions } from "./chatApi";

const PREFIX = "parley.chat.picks.";
const NEW = "new";

function key(conversationId: string | null): string {
  return PREFIX + (conversationId ?? NEW);
}

function parse(raw: string | null): TurnOptions | null {
  if (!raw) return null;
  try {
    const value = JSON.parse(raw) as Record<string, unknown>;
    const picks: TurnOptions = {};
    if (typeof value.model === "string" && value.model) picks.model = value.model;
    if (typeof value.assistant === "string" && value.assistant) picks.assistant = value.assistant;
    if (Array.isArray(value.knowledge_bases)) {
      picks.knowledge_bases = value.knowledge_bases.filter((v): v is string => typeof v === "string");
    }
    return picks;
  } catch {
    return null;
  }
}

function read(name: string): string | null {
  try {
    return localStorage.getItem(name);
  } catch {
    return null;
  }
}

function write(name: string, value: string): void {
  try {
    localStorage.setItem(name, value);
  } catch {
    // storage full or disabled: the picks last for this page only
  }
}

export function loadPicks(conversationId: string | null): TurnOptions {
  return parse(read(key(conversationId))) ?? {};
}

export function savePicks(conversationId: string | null, picks: TurnOptions): void {
  const value = JSON.stringify(picks);
  write(key(conversationId), value);
  if (conversationId) write(key(null), value);
}
