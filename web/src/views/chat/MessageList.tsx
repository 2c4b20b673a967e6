// The scrolling list of messages. Only a window of them is in the page (the newest 60;
// 40 earlier ones each time the person scrolls near the top, and as many later ones back
// near the bottom, never more than 150 at once, the scroll position kept); of those,
// a message is rendered (its Markdown parsed and sanitised) only once it comes within
// about two screens of the view, and the browser skips the layout of those off screen
// (content-visibility). The view follows the reply being written while it is at the
// bottom; scrolling up stops that. A reply starting, or "Scroll to the latest message",
// brings the view back to the newest messages.
import { createContext, type ComponentChildren } from "preact";
import { useContext, useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { t } from "../../i18n";
import { Icon } from "../../components/icons";
import type { Item } from "./items";
import {
  earlierRange,
  initialRange,
  keptRange,
  laterRange,
  nearBottom,
  nearTop,
  rangeAround,
  type Range,
} from "./windowing";

interface Props {
  items: Item[];
  /** Changes when another conversation is shown: the window starts again at the end. */
  listKey: string;
  renderItem: (item: Item) => ComponentChildren;
  children?: ComponentChildren;
}

/** The newest items are rendered at once (what the view opens on). */
const EAGER = 8;
/** Placeholder height of an item not rendered yet (px). */
const ESTIMATE = 160;

type Watch = (element: Element, show: () => void) => () => void;
const Watcher = createContext<Watch | null>(null);

/** One IntersectionObserver for the list (made on first use, when the scroller exists):
 * it calls an item's `show` when the item comes near the view. */
function useWatcher(root: { current: HTMLElement | null }): Watch | null {
  const state = useRef<{ observer: IntersectionObserver; callbacks: Map<Element, () => void> } | null>(null);
  const watch = useMemo<Watch | null>(() => {
    if (typeof IntersectionObserver === "undefined") return null;
    return (element, show) => {
      if (!state.current) {
        const callbacks = new Map<Element, () => void>();
        const observer = new IntersectionObserver(
          (entries) => {
            for (const entry of entries) {
              if (!entry.isIntersecting) continue;
              callbacks.get(entry.target)?.();
              callbacks.delete(entry.target);
              observer.unobserve(entry.target);
            }
          },
          { root: root.current, rootMargin: "1200px 0px 1200px 0px" },
        );
        state.current = { observer, callbacks };
      }
      const { observer, callbacks } = state.current;
      callbacks.set(element, show);
      observer.observe(element);
      return () => {
        callbacks.delete(element);
        observer.unobserve(element);
      };
    };
  }, []);
  useEffect(() => () => state.current?.observer.disconnect(), []);
  return watch;
}

/** An item rendered once it comes near the view (a placeholder until then). */
function Lazy({ eager, children }: { eager: boolean; children: () => ComponentChildren }) {
  const watch = useContext(Watcher);
  const [shown, setShown] = useState(eager || !watch);
  const holder = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (shown || !watch || !holder.current) return;
    return watch(holder.current, () => setShown(true));
  }, [shown, watch]);
  if (shown) return <>{children()}</>;
  return <div class="placeholder" ref={holder} style={{ height: `${ESTIMATE}px` }} />;
}

interface View {
  key: string;
  total: number;
  /** Index of the reply being written (-1: none). */
  live: number;
  range: Range;
}

/** The window for this render, kept in a ref: it follows the list's size, and a reply
 * starting out of view brings it back to that reply. Sets `jump` when the view should go
 * to the bottom (another conversation, a reply starting at the end). */
function nextView(view: View | null, key: string, total: number, live: number, jump: { current: boolean }): View {
  if (!view || view.key !== key) {
    jump.current = true;
    return { key, total, live, range: initialRange(total) };
  }
  let range = view.total === total ? view.range : keptRange(view.range, view.total, total);
  if (live >= 0 && view.live < 0) {
    if (live < range.start || live >= range.end) range = rangeAround(live, total);
    if (live === total - 1) jump.current = true;
  }
  return { key, total, live, range };
}

export function MessageList({ items, listKey, renderItem, children }: Props) {
  const scroller = useRef<HTMLDivElement>(null);
  const content = useRef<HTMLDivElement>(null);
  const top = useRef<HTMLDivElement>(null);
  const bottom = useRef<HTMLDivElement>(null);
  const follow = useRef(true);
  const jump = useRef(false);
  const anchor = useRef<{ key: string; top: number } | null>(null);
  const [away, setAway] = useState(false);
  const [, rerender] = useState(0);
  const watch = useWatcher(scroller);

  const total = items.length;
  const view = useRef<View | null>(null);
  view.current = nextView(view.current, listKey, total, items.findIndex((item) => item.kind === "live"), jump);
  const { start, end } = view.current.range;

  function toBottom() {
    const el = scroller.current;
    if (el) el.scrollTop = el.scrollHeight;
  }

  /** Render another window, keeping the rendered item that stays (the first one when
   * earlier items come, the last one when later ones do) where it is on screen. */
  function move(range: Range, keep: "first" | "last") {
    const now = view.current!;
    if (range.start === now.range.start && range.end === now.range.end) return;
    const rendered = content.current?.querySelectorAll<HTMLElement>(":scope > [data-key]");
    const held = rendered?.length ? rendered[keep === "first" ? 0 : rendered.length - 1] : null;
    if (held) anchor.current = { key: held.dataset.key!, top: held.getBoundingClientRect().top };
    view.current = { ...now, range };
    rerender((n) => n + 1);
  }

  const showEarlier = () => move(earlierRange(view.current!.range), "first");
  const showLater = () => move(laterRange(view.current!.range, view.current!.total), "last");

  /** Back to the newest messages, following the reply being written. */
  function toLatest() {
    const now = view.current!;
    jump.current = true;
    if (now.range.end < now.total) view.current = { ...now, range: initialRange(now.total) };
    rerender((n) => n + 1);
  }

  // another conversation, a reply starting, "Scroll to the latest message": the bottom
  useLayoutEffect(() => {
    if (!jump.current) return;
    jump.current = false;
    anchor.current = null;
    follow.current = true;
    setAway(false);
    toBottom();
  });

  // items were added above or below: put the view back where it was
  useLayoutEffect(() => {
    const held = anchor.current;
    anchor.current = null;
    const el = scroller.current;
    if (!held || !el) return;
    const same = content.current?.querySelector<HTMLElement>(`:scope > [data-key="${CSS.escape(held.key)}"]`);
    if (same) el.scrollTop += same.getBoundingClientRect().top - held.top;
  }, [start, end]);

  // follow growing content (a reply being written, images loading) while at the bottom
  useEffect(() => {
    const target = content.current;
    if (!target || typeof ResizeObserver === "undefined") return;
    const observer = new ResizeObserver(() => {
      if (follow.current) toBottom();
    });
    observer.observe(target);
    return () => observer.disconnect();
  }, []);

  // near the top: render earlier items (observed after the first scroll to the bottom);
  // near the end of a window that stops short of the newest: render later ones
  useEffect(() => {
    const root = scroller.current;
    if (!root || typeof IntersectionObserver === "undefined") return;
    const observers: IntersectionObserver[] = [];
    const observe = (target: HTMLElement | null, margin: string, show: () => void, when: () => boolean) => {
      if (!target) return;
      const observer = new IntersectionObserver(
        (entries) => {
          if (entries.some((e) => e.isIntersecting) && !anchor.current && when()) show();
        },
        { root, rootMargin: margin },
      );
      observer.observe(target);
      observers.push(observer);
    };
    observe(top.current, "400px 0px 0px 0px", showEarlier, () => !follow.current);
    observe(bottom.current, "0px 0px 400px 0px", showLater, () => true);
    return () => observers.forEach((observer) => observer.disconnect());
  }, [start, end, listKey]);

  function onScroll() {
    const el = scroller.current;
    if (!el) return;
    const { range, total } = view.current!;
    const atEnd = range.end === total && nearBottom(el.scrollTop, el.scrollHeight, el.clientHeight);
    follow.current = atEnd;
    if (away === atEnd) setAway(!atEnd);
    if (anchor.current || jump.current) return;
    if (range.start > 0 && nearTop(el.scrollTop)) showEarlier();
    else if (range.end < total && nearBottom(el.scrollTop, el.scrollHeight, el.clientHeight, 400)) showLater();
  }

  const shown = items.slice(start, end);
  return (
    <div class="message-scroller" ref={scroller} onScroll={onScroll} tabIndex={0} role="region" aria-label={t("chat.messages")}>
      <div class="message-list" ref={content}>
        {start > 0 && (
          <div class="earlier" ref={top}>
            <button type="button" class="link" onClick={showEarlier}>
              {t("chat.showEarlier", { count: start })}
            </button>
          </div>
        )}
        <Watcher.Provider value={watch}>
          {shown.map((item, i) => (
            <div class="item" key={item.key} data-key={item.key}>
              <Lazy eager={start + i >= total - EAGER}>{() => renderItem(item)}</Lazy>
            </div>
          ))}
        </Watcher.Provider>
        {end < total ? (
          <div class="later" ref={bottom}>
            <button type="button" class="link" onClick={showLater}>
              {t("chat.showLater", { count: total - end })}
            </button>
          </div>
        ) : (
          children
        )}
      </div>
      {away && (
        <button
          type="button"
          class="to-bottom"
          aria-label={t("chat.toBottom")}
          title={t("chat.toBottom")}
          onClick={toLatest}
        >
          <Icon name="down" width="20" height="20" />
        </button>
      )}
    </div>
  );
}
