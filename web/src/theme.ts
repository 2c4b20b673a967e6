// Light and dark follow the system unless the user picks one (kept in localStorage).
import { signal } from "@preact/signals";

export type Theme = "system" | "light" | "dark";

function saved(): Theme {
  const value = localStorage.getItem("parley.theme");
  return value === "light" || value === "dark" ? value : "system";
}

export const theme = signal<Theme>(saved());

export function applyTheme(value: Theme = theme.value): void {
  const root = document.documentElement;
  if (value === "system") delete root.dataset.theme;
  else root.dataset.theme = value;
}

export function setTheme(value: Theme): void {
  localStorage.setItem("parley.theme", value);
  theme.value = value;
  applyTheme(value);
}
