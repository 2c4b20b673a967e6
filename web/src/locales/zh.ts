import * as chat from "./chat";
import * as common from "./common";
import * as kb from "./kb";
import * as message from "./message";
import * as settings from "./settings";
import type { en } from "./en";

export const zh: Record<keyof typeof en, string> = {
  ...common.zh,
  ...chat.zh,
  ...kb.zh,
  ...settings.zh,
  ...message.zh,
};
