// The page's icons as inline SVG (no icon font, no emoji: every system draws them the
// same, a Chromium without an emoji font too). Decorative: the buttons carrying them have
// their own accessible names.
import type { JSX } from "preact";

const PATHS = {
  copy: "M9 9h10v10H9zM5 15V5h10",
  check: "M5 12l4 4 10-10",
  edit: "M4 20h4L19 9l-4-4L4 16zM14 6l4 4",
  regenerate: "M20 11a8 8 0 1 0-2.3 5.7M20 4v7h-7",
  fork: "M8 5a2 2 0 1 1-4 0a2 2 0 1 1 4 0M8 19a2 2 0 1 1-4 0a2 2 0 1 1 4 0M20 5a2 2 0 1 1-4 0a2 2 0 1 1 4 0M6 7v10M18 7v1a4 4 0 0 1-4 4h-4a4 4 0 0 0-4 4",
  trash: "M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13",
  attach: "M20 11l-8.5 8.5a5 5 0 0 1-7-7L13 4a3.5 3.5 0 0 1 5 5l-8.5 8.5a2 2 0 0 1-3-3L14 7",
  previous: "M15 5l-7 7 7 7",
  next: "M9 5l7 7-7 7",
  down: "M12 4v16M5 13l7 7 7-7",
  file: "M6 3h8l4 4v14H6zM14 3v4h4",
  menu: "M4 6h16M4 12h16M4 18h16",
  close: "M6 6l12 12M18 6L6 18",
} as const;

export type IconName = keyof typeof PATHS;

export function Icon({ name, ...rest }: { name: IconName } & JSX.SVGAttributes<SVGSVGElement>) {
  return (
    <svg
      class="icon-svg"
      viewBox="0 0 24 24"
      width="16"
      height="16"
      fill="none"
      stroke="currentColor"
      stroke-width="2"
      stroke-linecap="round"
      stroke-linejoin="round"
      aria-hidden="true"
      focusable="false"
      {...rest}
    >
      <path d={PATHS[name]} />
    </svg>
  );
}
