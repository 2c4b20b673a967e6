import * as chat from "./chat";
import * as common from "./common";
import * as kb from "./kb";
import * as message from "./message";
import * as settings from "./settings";

export const en = { ...common.en, ...chat.en, ...kb.en, ...settings.en, ...message.en };
