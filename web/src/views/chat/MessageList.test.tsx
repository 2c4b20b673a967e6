import { cleanup, fireEvent, render, screen } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { setLang } from "../../i18n";
import type { Item } from "./items";
import { MessageList } from "./MessageList";

beforeEach(() => setLang("en"));
afterEach(cleanup);

function items(count: number): Item[] {
  return Array.from({ length: count }, (_, i) => ({ kind: "draft", key: `m${i}`, user: { text: `message ${i}`, attachments: [] } }));
}

const renderItem = (item: Item) => <p class="probe">{item.kind === "draft" ? item.user.text : item.key}</p>;

describe("MessageList", () => {
  it("puts only the newest 60 of 2,000 messages in the page, and renders the newest at once", () => {
    const { container } = render(<MessageList items={items(2000)} listKey="c1" renderItem={renderItem} />);
    const rendered = container.querySelectorAll(".item");
    expect(rendered).toHaveLength(60);
    expect(rendered[0].getAttribute("data-key")).toBe("m1940");
    expect(rendered[59].getAttribute("data-key")).toBe("m1999");
    expect(screen.getByText("message 1999")).toBeTruthy();
    expect(screen.getByRole("button", { name: "Show earlier messages (1940 more)" })).toBeTruthy();
  });

  it("shows 40 earlier ones on request, and grows with new ones", () => {
    const { container, rerender } = render(<MessageList items={items(2000)} listKey="c1" renderItem={renderItem} />);
    fireEvent.click(screen.getByRole("button", { name: /Show earlier messages/ }));
    expect(container.querySelectorAll(".item")).toHaveLength(100);
    expect(container.querySelector(".item")?.getAttribute("data-key")).toBe("m1900");
    rerender(<MessageList items={items(2002)} listKey="c1" renderItem={renderItem} />);
    expect(container.querySelectorAll(".item")).toHaveLength(102);
    rerender(<MessageList items={items(10)} listKey="c2" renderItem={renderItem} />);
    expect(container.querySelectorAll(".item")).toHaveLength(10);
    expect(screen.queryByRole("button", { name: /Show earlier messages/ })).toBeNull();
  });

  it("keeps at most 150 in the page going up, and brings the later ones back going down", () => {
    const { container } = render(<MessageList items={items(2000)} listKey="c1" renderItem={renderItem} />);
    const keys = () => [...container.querySelectorAll(".item")].map((el) => el.getAttribute("data-key"));
    for (let i = 0; i < 5; i++) fireEvent.click(screen.getByRole("button", { name: /Show earlier messages/ }));
    expect(keys()).toHaveLength(150);
    expect(keys()[0]).toBe("m1740");
    expect(keys()[149]).toBe("m1889");
    expect(screen.getByRole("button", { name: "Show earlier messages (1740 more)" })).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Show later messages (110 more)" }));
    expect(keys()).toHaveLength(150);
    expect(keys()[0]).toBe("m1780");
    expect(keys()[149]).toBe("m1929");
    fireEvent.click(screen.getByRole("button", { name: "Show later messages (70 more)" }));
    fireEvent.click(screen.getByRole("button", { name: "Show later messages (30 more)" }));
    expect(keys()).toHaveLength(150);
    expect(keys()[149]).toBe("m1999");
    expect(screen.queryByRole("button", { name: /Show later messages/ })).toBeNull();
  });

  it("shows what follows the list (suggestions) only when the window reaches the end", () => {
    const { container } = render(
      <MessageList items={items(400)} listKey="c1" renderItem={renderItem}>
        <p>suggestions</p>
      </MessageList>,
    );
    expect(screen.getByText("suggestions")).toBeTruthy();
    for (let i = 0; i < 3; i++) fireEvent.click(screen.getByRole("button", { name: /Show earlier messages/ }));
    expect(container.querySelectorAll(".item")).toHaveLength(150);
    expect(screen.queryByText("suggestions")).toBeNull();
  });

  it("goes back to the newest messages when a reply starts out of view", () => {
    const { container, rerender } = render(<MessageList items={items(2000)} listKey="c1" renderItem={renderItem} />);
    const keys = () => [...container.querySelectorAll(".item")].map((el) => el.getAttribute("data-key"));
    for (let i = 0; i < 6; i++) fireEvent.click(screen.getByRole("button", { name: /Show earlier messages/ }));
    expect(keys()[149]).toBe("m1849");
    const sent: Item[] = [...items(2000), { kind: "draft", key: "draft", user: { text: "new", attachments: [] } }, { kind: "live", key: "live" }];
    rerender(<MessageList items={sent} listKey="c1" renderItem={renderItem} />);
    expect(keys()).toHaveLength(60);
    expect(keys().slice(-2)).toEqual(["draft", "live"]);
    expect(screen.queryByRole("button", { name: /Show later messages/ })).toBeNull();
  });
});
