import { describe, expect, it } from "vitest";
import {
  changedFields,
  emptyForm,
  fieldOf,
  fromAssistant,
  policiesFrom,
  policyRows,
  splitNames,
  toPayload,
  type AssistantForm,
} from "./assistantForm";
import type { AssistantRecord } from "./types";

function record(overrides: Partial<AssistantRecord> = {}): AssistantRecord {
  return {
    id: "asst_1",
    object: "assistant",
    name: "Helper",
    description: "Helps",
    system_prompt: "You are helpful.\nBe brief.",
    model: "gpt-4o-mini",
    sampling: { temperature: 0.7, max_tokens: 512, stop: ["END", "STOP"], logit_bias: { "50256": -100 } },
    reasoning_effort: "high",
    tools: ["web_fetch", "current_time", "mcp__github__*"],
    tool_policies: { web_fetch: "ask", "mcp__github__*": "deny" },
    knowledge_bases: ["kb_1", "handbook"],
    mcp_servers: ["github"],
    memory: { enabled: true, retrieval: true, scope: "global" },
    regex_rules: [{ pattern: "foo", replacement: "bar", roles: ["assistant"], display_only: true }],
    transformers: { time_reminder: true, placeholders: true },
    generate_titles: false,
    generate_suggestions: true,
    created_at: 1,
    updated_at: 2,
    ...overrides,
  };
}

function form(overrides: Partial<AssistantForm> = {}): AssistantForm {
  return { ...emptyForm(), name: "New one", ...overrides };
}

describe("assistant form -> JSON", () => {
  it("maps an empty form to the API's defaults", () => {
    const { payload, errors } = toPayload(form());
    expect(errors).toEqual({});
    expect(payload).toEqual({
      name: "New one",
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
      generate_titles: true,
      generate_suggestions: true,
      regex_rules: [],
      transformers: {},
    });
  });

  it("parses numbers, stop lines, tools and trims the name and model", () => {
    const { payload, errors } = toPayload(
      form({
        name: "  Coder  ",
        model: " local ",
        numbers: { temperature: "0.2", top_p: "", max_tokens: "1000", seed: "-3", presence_penalty: "", frequency_penalty: "1.5" },
        stop: "###\n\nEND",
        reasoning_effort: "low",
        tools: ["current_time"],
        extra_tools: "mcp__github__create_issue, mcp__files__*\nweb_fetch current_time",
      }),
    );
    expect(errors).toEqual({});
    expect(payload.name).toBe("Coder");
    expect(payload.model).toBe("local");
    expect(payload.sampling).toEqual({ temperature: 0.2, max_tokens: 1000, seed: -3, frequency_penalty: 1.5, stop: ["###", "END"] });
    expect(payload.reasoning_effort).toBe("low");
    expect(payload.tools).toEqual(["current_time", "mcp__github__create_issue", "mcp__files__*", "web_fetch"]);
  });

  it("reports problems beside the fields instead of sending them", () => {
    const { errors } = toPayload(
      form({
        name: "   ",
        numbers: { temperature: "3", top_p: "abc", max_tokens: "1.5", seed: "", presence_penalty: "", frequency_penalty: "" },
        stop: "a\nb\nc\nd\ne",
        policies: [
          { pattern: "web_fetch", policy: "ask" },
          { pattern: " web_fetch ", policy: "deny" },
        ],
        regex_rules: "{not json",
        transformers: "[]",
      }),
    );
    expect(errors.name?.key).toBe("assistants.err.nameRequired");
    expect(errors.temperature).toEqual({ key: "assistants.err.range", vars: { min: 0, max: 2 } });
    expect(errors.top_p?.key).toBe("assistants.err.notNumber");
    expect(errors.max_tokens?.key).toBe("assistants.err.notInteger");
    expect(errors.stop?.key).toBe("assistants.err.tooManyStops");
    expect(errors.tool_policies).toEqual({ key: "assistants.err.duplicatePolicy", vars: { tool: "web_fetch" } });
    expect(errors.regex_rules?.key).toBe("assistants.err.json");
    expect(errors.transformers?.key).toBe("assistants.err.jsonObject");
  });

  it("leaves out blank regex and transformer text rather than sending null", () => {
    const { payload, errors } = toPayload(form({ regex_rules: " ", transformers: "" }));
    expect(errors).toEqual({});
    expect("regex_rules" in payload).toBe(false);
    expect("transformers" in payload).toBe(false);
  });
});

describe("JSON -> assistant form -> JSON", () => {
  it("splits tools into the built-in checkboxes and the other names", () => {
    const f = fromAssistant(record());
    expect(f.tools).toEqual(["web_fetch", "current_time"]);
    expect(f.extra_tools).toBe("mcp__github__*");
    expect(f.numbers.temperature).toBe("0.7");
    expect(f.numbers.max_tokens).toBe("512");
    expect(f.numbers.top_p).toBe("");
    expect(f.stop).toBe("END\nSTOP");
    expect(f.kept_sampling).toEqual({ logit_bias: { "50256": -100 } });
    expect(f.memory_scope).toBe("global");
    expect(f.policies).toEqual([
      { pattern: "web_fetch", policy: "ask" },
      { pattern: "mcp__github__*", policy: "deny" },
    ]);
  });

  it("round-trips every field the API answers", () => {
    const a = record();
    const { payload, errors } = toPayload(fromAssistant(a));
    expect(errors).toEqual({});
    expect(payload).toEqual({
      name: a.name,
      description: a.description,
      system_prompt: a.system_prompt,
      model: a.model,
      sampling: a.sampling,
      reasoning_effort: a.reasoning_effort,
      tools: a.tools,
      tool_policies: a.tool_policies,
      knowledge_bases: a.knowledge_bases,
      mcp_servers: a.mcp_servers,
      memory: a.memory,
      generate_titles: a.generate_titles,
      generate_suggestions: a.generate_suggestions,
      regex_rules: a.regex_rules,
      transformers: a.transformers,
    });
  });

  it("patches only what changed, each field whole (logit_bias kept in sampling)", () => {
    const a = record();
    const before = toPayload(fromAssistant(a)).payload;
    const edited = fromAssistant(a);
    expect(changedFields(before, toPayload(edited).payload)).toEqual({});

    edited.numbers.temperature = "1";
    edited.policies = [...edited.policies, { pattern: "current_time", policy: "auto" }];
    edited.memory_enabled = false;
    const patch = changedFields(before, toPayload(edited).payload);
    expect(patch).toEqual({
      sampling: { temperature: 1, max_tokens: 512, stop: ["END", "STOP"], logit_bias: { "50256": -100 } },
      tool_policies: { web_fetch: "ask", "mcp__github__*": "deny", current_time: "auto" },
      memory: { enabled: false, retrieval: true, scope: "global" },
    });
  });

  it("treats reordered transformer keys as unchanged", () => {
    const a = record();
    const before = toPayload(fromAssistant(a)).payload;
    const edited = fromAssistant(a);
    edited.transformers = '{"placeholders": true, "time_reminder": true}';
    expect(changedFields(before, toPayload(edited).payload)).toEqual({});
  });

  it("clears the model back to the server default with null", () => {
    const a = record();
    const before = toPayload(fromAssistant(a)).payload;
    const edited = fromAssistant(a);
    edited.model = "";
    expect(changedFields(before, toPayload(edited).payload)).toEqual({ model: null });
  });
});

describe("approval policy rows", () => {
  it("keeps the object's order both ways and skips blank rows", () => {
    const rows = policyRows({ "mcp__*": "ask", web_fetch: "deny", current_time: "auto" });
    expect(rows.map((r) => r.pattern)).toEqual(["mcp__*", "web_fetch", "current_time"]);
    const { policies, duplicate } = policiesFrom([...rows, { pattern: "  ", policy: "deny" }]);
    expect(duplicate).toBeNull();
    expect(Object.entries(policies)).toEqual([
      ["mcp__*", "ask"],
      ["web_fetch", "deny"],
      ["current_time", "auto"],
    ]);
  });

  it("trims patterns and names the first repeated row", () => {
    const { policies, duplicate } = policiesFrom([
      { pattern: " a ", policy: "ask" },
      { pattern: "b", policy: "auto" },
      { pattern: "a", policy: "deny" },
    ]);
    expect(policies).toEqual({ a: "ask", b: "auto" });
    expect(duplicate).toBe(2);
  });
});

describe("helpers", () => {
  it("splits tool names on commas, spaces and lines", () => {
    expect(splitNames(" a, b\n c,,d ")).toEqual(["a", "b", "c", "d"]);
    expect(splitNames("")).toEqual([]);
  });

  it("maps the server's param to the field that shows its error", () => {
    expect(fieldOf("sampling.temperature")).toBe("temperature");
    expect(fieldOf("sampling.stop")).toBe("stop");
    expect(fieldOf("sampling.logit_bias")).toBe("sampling");
    expect(fieldOf("tools.2")).toBe("tools");
    expect(fieldOf("mcp_servers.0")).toBe("mcp_servers");
    expect(fieldOf("memory.scope")).toBe("memory");
    expect(fieldOf("name")).toBe("name");
    expect(fieldOf("model")).toBe("model");
    expect(fieldOf("transformers.lorebook.0.keywords")).toBe("transformers");
    expect(fieldOf(null)).toBe("form");
    expect(fieldOf("assistant_id")).toBe("form");
  });
});
