import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { App } from "./app";
import { setLang } from "./i18n";
import { session } from "./session";

function json(body: unknown): Response {
  return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
}

const SESSION = {
  object: "session",
  keys_required: false,
  signed_in: true,
  owner: "alice",
  key_id: null,
  key_name: null,
  admin: true,
};
const CONVERSATION = { id: "c1", object: "conversation", title: "Zebra question", created_at: 1, updated_at: 1 };

/** Whether the page is laid out as a phone's (the menu button shown, the sidebar a drawer):
 * happy-dom lays nothing out, so the menu button's boxes say so. */
let phone = true;

beforeEach(() => {
  setLang("en");
  session.value = null;
  phone = true;
  vi.stubGlobal(
    "fetch",
    vi.fn(async (input: RequestInfo | URL) => {
      const path = new URL(String(input), location.href).pathname;
      if (path === "/v1/session") return json(SESSION);
      if (path === "/v1/conversations") return json({ object: "list", data: [CONVERSATION], has_more: false });
      return json({ object: "list", data: [], has_more: false });
    }),
  );
  const rects = HTMLElement.prototype.getClientRects;
  vi.spyOn(HTMLElement.prototype, "getClientRects").mockImplementation(function (this: HTMLElement) {
    if (this.classList.contains("menu-button")) return (phone ? [{}] : []) as unknown as DOMRectList;
    return rects.call(this);
  });
});

afterEach(() => {
  cleanup();
  vi.restoreAllMocks();
  vi.unstubAllGlobals();
});

/** The app, settled: the chat's composer has taken focus (as it does on opening). */
async function openApp() {
  render(<App />);
  const menu = await screen.findByRole("button", { name: "Menu" });
  await waitFor(() => expect(document.activeElement?.id).toBe("composer-input"));
  return menu;
}

describe("the phone's menu", () => {
  it("moves focus into the drawer, has its own close button, and gives focus back", async () => {
    const menu = await openApp();
    expect(menu.getAttribute("aria-expanded")).toBe("false");
    expect(screen.queryByRole("button", { name: "Close menu" })).toBeNull();
    fireEvent.click(menu);
    expect(menu.getAttribute("aria-expanded")).toBe("true");
    const close = screen.getByRole("button", { name: "Close menu" });
    expect(document.activeElement).toBe(close);
    expect(document.getElementById("sidebar")?.contains(close)).toBe(true);
    fireEvent.click(close);
    expect(menu.getAttribute("aria-expanded")).toBe("false");
    expect(document.activeElement).toBe(menu);
    expect(screen.queryByRole("button", { name: "Close menu" })).toBeNull();
  });

  it("closes on Esc, before the chat sees it (Esc there stops a reply)", async () => {
    const menu = await openApp();
    fireEvent.click(menu);
    const seen: boolean[] = [];
    const onWindow = (event: KeyboardEvent) => seen.push(event.defaultPrevented);
    addEventListener("keydown", onWindow);
    try {
      fireEvent.keyDown(document.activeElement!, { key: "Escape" });
    } finally {
      removeEventListener("keydown", onWindow);
    }
    expect(menu.getAttribute("aria-expanded")).toBe("false");
    expect(document.activeElement).toBe(menu);
    expect(seen).toEqual([true]);
    // closed: Esc is the chat's again
    fireEvent.keyDown(document.body, { key: "Escape" });
    expect(menu.getAttribute("aria-expanded")).toBe("false");
  });

  it("leaves Esc to the rename box (it cancels the rename only)", async () => {
    const menu = await openApp();
    fireEvent.click(menu);
    fireEvent.click(await screen.findByRole("button", { name: "Rename: Zebra question" }));
    const box = screen.getByRole("textbox", { name: "Rename" });
    fireEvent.keyDown(box, { key: "Escape" });
    await waitFor(() => expect(screen.queryByRole("textbox", { name: "Rename" })).toBeNull());
    expect(menu.getAttribute("aria-expanded")).toBe("true");
  });

  it("does nothing of the kind on a wide screen, where the sidebar is always shown", async () => {
    phone = false;
    const menu = await openApp();
    fireEvent.click(menu);
    expect(document.activeElement).not.toBe(screen.getByRole("button", { name: "Close menu" }));
    const event = new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true });
    document.body.dispatchEvent(event);
    expect(event.defaultPrevented).toBe(false);
  });
});

describe("the sidebar's icons", () => {
  it("are drawn as SVG (no emoji font needed), with the buttons' names kept", async () => {
    await openApp();
    for (const name of ["Rename: Zebra question", "Delete: Zebra question"]) {
      const button = await screen.findByRole("button", { name });
      expect(button.querySelector("svg[aria-hidden='true']")).not.toBeNull();
      expect(button.textContent).toBe("");
    }
    const menu = screen.getByRole("button", { name: "Menu" });
    expect(menu.querySelector("svg")).not.toBeNull();
    expect(menu.textContent).toBe("");
  });
});
