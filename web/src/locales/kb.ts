// Strings of the kb screens (see common.ts for the rules).
export const en = {
  "kb.title": "kb",
};

export const zh: Record<keyof typeof en, string> = {
  "kb.title": "kb",
};
