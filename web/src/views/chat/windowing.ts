// Which messages of a long conversation are rendered: a window [start, end) of the list.
// It opens on the newest WINDOW; scrolling near the top adds STEP earlier ones and, past
// CAP rendered, drops as many from the bottom; scrolling back down does the reverse. A
// conversation of 2,000 messages thus never has more than CAP in the page; the browser
// skips laying out those off screen (`content-visibility: auto` in chat.css).

export const WINDOW = 60;
export const STEP = 40;
export const CAP = 150;

export interface Range {
  /** Index of the first rendered item. */
  start: number;
  /** Index after the last rendered item (the list's length: the window reaches the end). */
  end: number;
}

/** The window a conversation of `total` items opens on: its newest `size`. */
export function initialRange(total: number, size = WINDOW): Range {
  return { start: Math.max(0, total - size), end: total };
}

/** The window after showing `step` earlier items, dropping the last ones beyond `cap`. */
export function earlierRange(range: Range, step = STEP, cap = CAP): Range {
  const start = Math.max(0, range.start - step);
  return { start, end: Math.min(range.end, start + cap) };
}

/** The window after showing `step` later items, dropping the first ones beyond `cap`. */
export function laterRange(range: Range, total: number, step = STEP, cap = CAP): Range {
  const end = Math.min(total, range.end + step);
  return { start: Math.max(range.start, end - cap), end };
}

/** The window after the list changed from `before` to `after` items (a reply added, a
 * version deleted or selected). A window reaching the end follows it: new items are
 * rendered (the first ones dropped beyond `cap`), and it never shows fewer than `size`
 * when items go. A window away from the end stays where it is, within the list. */
export function keptRange(range: Range, before: number, after: number, size = WINDOW, cap = CAP): Range {
  const end = range.end >= before ? after : Math.min(range.end, after);
  const start = Math.max(0, Math.min(range.start, end - size), range.end >= before ? end - cap : 0);
  return { start, end };
}

/** A window of `size` that shows item `index` (a reply starting out of view): the newest
 * `size` when it is the last item. */
export function rangeAround(index: number, total: number, size = WINDOW): Range {
  const start = Math.max(0, Math.min(index + 1, total) - size);
  return { start, end: Math.min(total, start + size) };
}

/** Whether the view is within `slack` px of the bottom (to follow new output). */
export function nearBottom(scrollTop: number, scrollHeight: number, clientHeight: number, slack = 80): boolean {
  return scrollHeight - scrollTop - clientHeight <= slack;
}

/** Whether earlier items should be rendered: the view is within `margin` px of the top. */
export function nearTop(scrollTop: number, margin = 400): boolean {
  return scrollTop <= margin;
}
