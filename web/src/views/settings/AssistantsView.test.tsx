import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { setLang } from "../../i18n";
import { AssistantsView } from "./AssistantsView";
import { error, fakeApi, HOSTILE, list } from "./fakeApi";
import type { AssistantRecord } from "./types";

function assistant(overrides: Partial<AssistantRecord> = {}): AssistantRecord {
  return {
    id: "asst_1",
    object: "assistant",
    name: "Helper",
    description: "",
    system_prompt: "",
    model: null,
    sampling: {},
    reasoning_effort: null,
    tools: [],
    tool_policies: {},
    knowledge_bases: [],
    mcp_servers: [],
    memory: { enabled: false, retrieval: false, scope: "assistant" },
    regex_rules: [],
    transformers: {},
    generate_titles: true,
    generate_suggestions: true,
    created_at: 1,
    updated_at: 1,
    ...overrides,
  };
}

const common = {
  "GET /v1/models": { object: "list", data: [{ id: "gpt-4o-mini", object: "model" }, { id: "local", object: "model" }] },
  "GET /v1/knowledge_bases": list([{ id: "kb_1", name: "Handbook" }]),
  "GET /v1/mcp/servers": list([{ name: "github", enabled: true }]),
};

beforeEach(() => setLang("en"));
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  delete (window as unknown as { __pwned?: number }).__pwned;
});

describe("AssistantsView", () => {
  it("shows hostile names, descriptions and tools as text, never as HTML", async () => {
    fakeApi({
      ...common,
      "GET /v1/assistants": list([
        assistant({ name: HOSTILE, description: `<b onmouseover=alert(1)>bold</b>`, model: `<i>m</i>`, tools: [`<svg onload=alert(1)>`] }),
      ]),
    });
    const { container } = render(<AssistantsView />);
    const heading = await screen.findByRole("heading", { name: HOSTILE });
    expect(heading.textContent).toBe(HOSTILE);
    expect(container.querySelector("img, script, b, i, svg")).toBeNull();
    expect(container.textContent).toContain(`<b onmouseover=alert(1)>bold</b>`);
    expect(screen.getByRole("button", { name: `Edit assistant ${HOSTILE}` })).toBeTruthy();
    expect((window as unknown as { __pwned?: number }).__pwned).toBeUndefined();
  });

  it("creates an assistant from the form: tools, a policy, a knowledge base, memory", async () => {
    const api = fakeApi({
      ...common,
      "GET /v1/assistants": list([]),
      "POST /v1/assistants": (request) => assistant({ ...(request.body as object), id: "asst_new" }),
    });
    render(<AssistantsView />);
    fireEvent.click(await screen.findByRole("button", { name: /New assistant/ }));
    fireEvent.input(screen.getByLabelText("Name"), { target: { value: "Researcher" } });
    fireEvent.input(screen.getByLabelText("System prompt"), { target: { value: "Cite <sources>." } });
    await screen.findByRole("option", { name: "local" });
    fireEvent.change(screen.getByLabelText("Model"), { target: { value: "local" } });
    fireEvent.input(screen.getByLabelText("Temperature"), { target: { value: "0.3" } });
    fireEvent.click(screen.getByLabelText("web_fetch"));
    fireEvent.click(screen.getByRole("button", { name: /Add policy/ }));
    fireEvent.input(screen.getByLabelText("Tool or pattern 1"), { target: { value: "web_fetch" } });
    fireEvent.change(screen.getByLabelText("Approval 1"), { target: { value: "deny" } });
    fireEvent.click(await screen.findByLabelText("Handbook"));
    fireEvent.click(screen.getByLabelText("github"));
    fireEvent.click(screen.getByLabelText("Keep memories"));
    fireEvent.click(screen.getByLabelText("Suggest follow-up questions"));
    fireEvent.click(screen.getByRole("button", { name: "Create assistant" }));

    await screen.findByRole("heading", { name: "Researcher" });
    expect(api.last("POST", "/v1/assistants")?.body).toEqual({
      name: "Researcher",
      description: "",
      system_prompt: "Cite <sources>.",
      model: "local",
      sampling: { temperature: 0.3 },
      reasoning_effort: null,
      tools: ["web_fetch"],
      tool_policies: { web_fetch: "deny" },
      knowledge_bases: ["kb_1"],
      mcp_servers: ["github"],
      memory: { enabled: true, retrieval: false, scope: "assistant" },
      generate_titles: true,
      generate_suggestions: false,
      regex_rules: [],
      transformers: {},
    });
  });

  it("shows the server's refusal beside the field its param names, as text", async () => {
    fakeApi({
      ...common,
      "GET /v1/assistants": list([assistant()]),
      "PATCH /v1/assistants/asst_1": error(400, `sampling.temperature: must be <= 2 <img src=x>`, "sampling.temperature"),
    });
    const { container } = render(<AssistantsView />);
    fireEvent.click(await screen.findByRole("button", { name: "Edit assistant Helper" }));
    const temperature = screen.getByLabelText("Temperature");
    fireEvent.input(temperature, { target: { value: "1.5" } });
    fireEvent.click(screen.getByRole("button", { name: "Save assistant" }));
    await waitFor(() => expect(temperature.getAttribute("aria-invalid")).toBe("true"));
    const note = document.getElementById(temperature.getAttribute("aria-describedby")!.split(" ").pop()!)!;
    expect(note.textContent).toBe("sampling.temperature: must be <= 2 <img src=x>");
    expect(container.querySelector("img")).toBeNull();
    expect(screen.getByText("The assistant was not saved:")).toBeTruthy();
  });

  it("checks the form before sending and sends only what changed on edit", async () => {
    const api = fakeApi({
      ...common,
      "GET /v1/assistants": list([assistant({ model: "not-listed", tool_policies: { "mcp__*": "ask" } })]),
      "PATCH /v1/assistants/asst_1": (request) => assistant({ ...(request.body as object) }),
    });
    render(<AssistantsView />);
    fireEvent.click(await screen.findByRole("button", { name: "Edit assistant Helper" }));
    // a model the list does not name is shown as free text
    await waitFor(() => expect((screen.getByLabelText("Model name") as HTMLInputElement).value).toBe("not-listed"));
    expect((screen.getByLabelText("Tool or pattern 1") as HTMLInputElement).value).toBe("mcp__*");

    fireEvent.input(screen.getByLabelText("Max tokens"), { target: { value: "2.5" } });
    fireEvent.click(screen.getByRole("button", { name: "Save assistant" }));
    expect(await screen.findByText("Enter a whole number.", { selector: ".field-error" })).toBeTruthy();
    expect(api.last("PATCH", "/v1/assistants/asst_1")).toBeUndefined();

    fireEvent.input(screen.getByLabelText("Max tokens"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Remove rule 1" }));
    fireEvent.input(screen.getByLabelText("Description"), { target: { value: "Now described" } });
    fireEvent.click(screen.getByRole("button", { name: "Save assistant" }));
    await waitFor(() => expect(api.last("PATCH", "/v1/assistants/asst_1")).toBeTruthy());
    expect(api.last("PATCH", "/v1/assistants/asst_1")?.body).toEqual({ description: "Now described", tool_policies: {} });
  });

  it("deletes after confirmation", async () => {
    const api = fakeApi({
      ...common,
      "GET /v1/assistants": list([assistant()]),
      "DELETE /v1/assistants/asst_1": { id: "asst_1", object: "assistant.deleted", deleted: true },
    });
    render(<AssistantsView />);
    fireEvent.click(await screen.findByRole("button", { name: "Delete assistant Helper" }));
    const dialog = screen.getByRole("dialog");
    expect(api.last("DELETE", "/v1/assistants/asst_1")).toBeUndefined();
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete" }));
    await screen.findByText("No assistants yet.");
    expect(api.last("DELETE", "/v1/assistants/asst_1")).toBeTruthy();
  });
});
