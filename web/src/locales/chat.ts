// Strings of the chat screens (see common.ts for the rules).
export const en = {
  "chat.title": "chat",
};

export const zh: Record<keyof typeof en, string> = {
  "chat.title": "chat",
};
