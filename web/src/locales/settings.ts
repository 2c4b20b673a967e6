// Strings of the settings screens (see common.ts for the rules).
export const en = {
  "settings.title": "settings",
};

export const zh: Record<keyof typeof en, string> = {
  "settings.title": "settings",
};
