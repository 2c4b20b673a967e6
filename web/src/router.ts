// The page's routes live in the URL (deep links, the back button): `/`, `/c/{id}`,
// `/kb`, `/kb/{id}`, `/assistants`, `/memory`, `/settings`. The server answers each with
// the same index.html.
import { signal } from "@preact/signals";

export type Route =
  | { name: "chat"; id: string | null }
  | { name: "kb"; id: string | null }
  | { name: "assistants" }
  | { name: "memory" }
  | { name: "settings" }
  | { name: "notFound" };

export function parse(path: string): Route {
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const [head, id, ...rest] = parts;
  if (rest.length) return { name: "notFound" };
  if (!head) return { name: "chat", id: null };
  if (head === "c" && id) return { name: "chat", id };
  if (head === "kb") return { name: "kb", id: id ?? null };
  if (!id && (head === "assistants" || head === "memory" || head === "settings")) {
    return { name: head };
  }
  return { name: "notFound" };
}

export function href(route: Route): string {
  switch (route.name) {
    case "chat":
      return route.id ? `/c/${encodeURIComponent(route.id)}` : "/";
    case "kb":
      return route.id ? `/kb/${encodeURIComponent(route.id)}` : "/kb";
    case "notFound":
      return "/";
    default:
      return `/${route.name}`;
  }
}

export const route = signal<Route>(parse(location.pathname));

export function navigate(to: Route, options: { replace?: boolean } = {}): void {
  const target = href(to);
  if (target !== location.pathname) {
    if (options.replace) history.replaceState(null, "", target);
    else history.pushState(null, "", target);
  }
  route.value = to;
}

addEventListener("popstate", () => {
  route.value = parse(location.pathname);
});

/** Links inside the app navigate without reloading the page. */
export function onLinkClick(event: MouseEvent, to: Route): void {
  if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
    return;
  }
  event.preventDefault();
  navigate(to);
}
