// The composer's keyboard: Enter sends, Shift+Enter is a new line, Esc stops a reply.
// Enter that confirms an input method's composition (Chinese, Japanese ...) is the input
// method's, never a send.

export type KeyAction = "send" | "stop" | null;

export interface KeyLike {
  key: string;
  shiftKey: boolean;
  altKey?: boolean;
  ctrlKey?: boolean;
  metaKey?: boolean;
  isComposing?: boolean;
  keyCode?: number;
}

export function composerKey(event: KeyLike, replying: boolean): KeyAction {
  if (event.isComposing || event.keyCode === 229) return null;
  if (event.key === "Escape") return replying ? "stop" : null;
  if (event.key !== "Enter") return null;
  if (event.shiftKey || event.altKey) return null;
  return "send";
}

/** Whether a message can be sent: some text or an attachment, and no reply running. */
export function canSend(text: string, attachments: number, replying: boolean): boolean {
  return !replying && (text.trim().length > 0 || attachments > 0);
}
