// The assistant form's state, and the mapping between it and the API's JSON
// (src/parley/conversations/assistants.py): what a person types becomes the body of
// POST /v1/assistants or, as only what changed, of PATCH /v1/assistants/{id}.
import type { AssistantRecord, MemoryScope, ReasoningEffort, ToolPolicy } from "./types";

/** The built-in server tools README "The agent" names (no route lists them yet). */
export const BUILTIN_TOOLS = [
  "current_time",
  "web_fetch",
  "workspace_list",
  "workspace_read",
  "workspace_write",
  "workspace_search",
  "workspace_shell",
  "conversation_search",
  "kb_search",
  "kb_list",
  "memory_remember",
  "memory_recall",
  "memory_forget",
  "get_session_capabilities",
  "activate_tools",
] as const;

export const POLICIES: readonly ToolPolicy[] = ["auto", "ask", "deny"];
export const EFFORTS: readonly ReasoningEffort[] = ["low", "medium", "high", "max"];

export interface PolicyRow {
  /** a tool name or a glob (`mcp__github__*`) */
  pattern: string;
  policy: ToolPolicy;
}

export const NUMBER_FIELDS = [
  "temperature",
  "top_p",
  "max_tokens",
  "seed",
  "presence_penalty",
  "frequency_penalty",
] as const;
export type NumberField = (typeof NUMBER_FIELDS)[number];

const INTEGER_FIELDS: ReadonlySet<NumberField> = new Set(["max_tokens", "seed"]);
const RANGES: Record<NumberField, [number, number]> = {
  temperature: [0, 2],
  top_p: [0, 1],
  max_tokens: [1, Number.MAX_SAFE_INTEGER],
  seed: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  presence_penalty: [-2, 2],
  frequency_penalty: [-2, 2],
};

export interface AssistantForm {
  name: string;
  description: string;
  system_prompt: string;
  /** "": the server's default model */
  model: string;
  /** typed as text; "": unset */
  numbers: Record<NumberField, string>;
  /** one stop sequence a line */
  stop: string;
  reasoning_effort: ReasoningEffort | "";
  /** server tools, in order */
  tools: string[];
  /** more tool names, separated by commas, spaces or lines */
  extra_tools: string;
  policies: PolicyRow[];
  knowledge_bases: string[];
  mcp_servers: string[];
  memory_enabled: boolean;
  memory_retrieval: boolean;
  memory_scope: MemoryScope;
  generate_titles: boolean;
  generate_suggestions: boolean;
  /** JSON, edited as text in "Advanced" */
  regex_rules: string;
  transformers: string;
  /** sampling options the form has no field for (logit_bias), kept as they were */
  kept_sampling: Record<string, unknown>;
}

/** What POST /v1/assistants takes (and PATCH, a subset of it). */
export interface AssistantPayload {
  name: string;
  description: string;
  system_prompt: string;
  model: string | null;
  sampling: Record<string, unknown>;
  reasoning_effort: ReasoningEffort | null;
  tools: string[];
  tool_policies: Record<string, ToolPolicy>;
  knowledge_bases: string[];
  mcp_servers: string[];
  memory: { enabled: boolean; retrieval: boolean; scope: MemoryScope };
  generate_titles: boolean;
  generate_suggestions: boolean;
  regex_rules?: unknown[];
  transformers?: Record<string, unknown>;
}

/** Form field -> the problem with it (a message key and its variables). */
export type FieldProblem = { key: ProblemKey; vars?: Record<string, string | number> };
export type ProblemKey =
  | "assistants.err.nameRequired"
  | "assistants.err.notNumber"
  | "assistants.err.notInteger"
  | "assistants.err.range"
  | "assistants.err.tooManyStops"
  | "assistants.err.duplicatePolicy"
  | "assistants.err.toolName"
  | "assistants.err.json"
  | "assistants.err.jsonList"
  | "assistants.err.jsonObject";
export type FormErrors = Partial<Record<string, FieldProblem>>;

export function emptyForm(): AssistantForm {
  return {
    name: "",
    description: "",
    system_prompt: "",
    model: "",
    numbers: {
      temperature: "",
      top_p: "",
      max_tokens: "",
      seed: "",
      presence_penalty: "",
      frequency_penalty: "",
    },
    stop: "",
    reasoning_effort: "",
    tools: [],
    extra_tools: "",
    policies: [],
    knowledge_bases: [],
    mcp_servers: [],
    memory_enabled: false,
    memory_retrieval: false,
    memory_scope: "assistant",
    generate_titles: true,
    generate_suggestions: true,
    regex_rules: "[]",
    transformers: "{}",
    kept_sampling: {},
  };
}

const builtin: ReadonlySet<string> = new Set(BUILTIN_TOOLS);

/** An assistant as the API answers it -> the form. */
export function fromAssistant(assistant: AssistantRecord): AssistantForm {
  const form = emptyForm();
  const sampling = { ...(assistant.sampling ?? {}) } as Record<string, unknown>;
  for (const field of NUMBER_FIELDS) {
    const value = sampling[field];
    form.numbers[field] = typeof value === "number" ? String(value) : "";
    delete sampling[field];
  }
  form.stop = Array.isArray(sampling.stop) ? (sampling.stop as string[]).join("\n") : "";
  delete sampling.stop;
  form.kept_sampling = sampling;
  const tools = assistant.tools ?? [];
  return {
    ...form,
    name: assistant.name,
    description: assistant.description ?? "",
    system_prompt: assistant.system_prompt ?? "",
    model: assistant.model ?? "",
    reasoning_effort: assistant.reasoning_effort ?? "",
    tools: tools.filter((name) => builtin.has(name)),
    extra_tools: tools.filter((name) => !builtin.has(name)).join(", "),
    policies: policyRows(assistant.tool_policies ?? {}),
    knowledge_bases: [...(assistant.knowledge_bases ?? [])],
    mcp_servers: [...(assistant.mcp_servers ?? [])],
    memory_enabled: assistant.memory?.enabled ?? false,
    memory_retrieval: assistant.memory?.retrieval ?? false,
    memory_scope: assistant.memory?.scope ?? "assistant",
    generate_titles: assistant.generate_titles ?? true,
    generate_suggestions: assistant.generate_suggestions ?? true,
    regex_rules: JSON.stringify(assistant.regex_rules ?? [], null, 2),
    transformers: JSON.stringify(assistant.transformers ?? {}, null, 2),
  };
}

/** `tool_policies` -> rows, in the object's order. */
export function policyRows(policies: Record<string, ToolPolicy>): PolicyRow[] {
  return Object.entries(policies).map(([pattern, policy]) => ({ pattern, policy }));
}

/** Rows -> `tool_policies` (blank rows left out), or the first row that repeats a tool. */
export function policiesFrom(rows: PolicyRow[]): { policies: Record<string, ToolPolicy>; duplicate: number | null } {
  const policies: Record<string, ToolPolicy> = {};
  let duplicate: number | null = null;
  rows.forEach((row, index) => {
    const pattern = row.pattern.trim();
    if (!pattern) return;
    if (pattern in policies) {
      if (duplicate === null) duplicate = index;
      return;
    }
    policies[pattern] = row.policy;
  });
  return { policies, duplicate };
}

/** Tool names typed in one box: separated by commas, spaces or new lines. */
export function splitNames(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((name) => name.trim())
    .filter(Boolean);
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}

function parseNumber(field: NumberField, text: string): number | FieldProblem | undefined {
  const trimmed = text.trim();
  if (!trimmed) return undefined;
  const value = Number(trimmed);
  if (!Number.isFinite(value)) return { key: "assistants.err.notNumber" };
  if (INTEGER_FIELDS.has(field) && !Number.isInteger(value)) return { key: "assistants.err.notInteger" };
  const [min, max] = RANGES[field];
  if (value < min || value > max) {
    return { key: "assistants.err.range", vars: { min, max: max === Number.MAX_SAFE_INTEGER ? "∞" : max } };
  }
  return value;
}

/** The form -> the JSON body, or the problems to show beside the fields (keyed as
 * `fieldOf` keys the server's `param`). */
export function toPayload(form: AssistantForm): { payload: AssistantPayload; errors: FormErrors } {
  const errors: FormErrors = {};
  const name = form.name.trim();
  if (!name) errors.name = { key: "assistants.err.nameRequired" };

  const sampling: Record<string, unknown> = {};
  for (const field of NUMBER_FIELDS) {
    const parsed = parseNumber(field, form.numbers[field]);
    if (typeof parsed === "number") sampling[field] = parsed;
    else if (parsed) errors[field] = parsed;
  }
  const stop = form.stop.split("\n").filter((line) => line.length > 0);
  if (stop.length > 4) errors.stop = { key: "assistants.err.tooManyStops" };
  if (stop.length) sampling.stop = stop;
  for (const [key, value] of Object.entries(form.kept_sampling)) {
    if (value !== undefined && value !== null) sampling[key] = value;
  }

  const { policies, duplicate } = policiesFrom(form.policies);
  if (duplicate !== null) {
    errors.tool_policies = {
      key: "assistants.err.duplicatePolicy",
      vars: { tool: form.policies[duplicate].pattern.trim() },
    };
  }

  const tools = unique([...form.tools, ...splitNames(form.extra_tools)]);
  const badTool = tools.find((tool) => tool.length > 128);
  if (badTool) errors.tools = { key: "assistants.err.toolName", vars: { tool: badTool.slice(0, 40) } };

  const payload: AssistantPayload = {
    name,
    description: form.description,
    system_prompt: form.system_prompt,
    model: form.model.trim() || null,
    sampling,
    reasoning_effort: form.reasoning_effort || null,
    tools,
    tool_policies: policies,
    knowledge_bases: unique(form.knowledge_bases),
    mcp_servers: unique(form.mcp_servers),
    memory: {
      enabled: form.memory_enabled,
      retrieval: form.memory_retrieval,
      scope: form.memory_scope,
    },
    generate_titles: form.generate_titles,
    generate_suggestions: form.generate_suggestions,
  };

  const rules = parseJson(form.regex_rules, "list");
  if (rules.problem) errors.regex_rules = rules.problem;
  else if (rules.value !== undefined) payload.regex_rules = rules.value as unknown[];
  const transformers = parseJson(form.transformers, "object");
  if (transformers.problem) errors.transformers = transformers.problem;
  else if (transformers.value !== undefined) {
    payload.transformers = transformers.value as Record<string, unknown>;
  }
  return { payload, errors };
}

function parseJson(text: string, shape: "list" | "object"): { value?: unknown; problem?: FieldProblem } {
  if (!text.trim()) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { problem: { key: "assistants.err.json", vars: { message: (error as Error).message } } };
  }
  if (shape === "list" && !Array.isArray(value)) return { problem: { key: "assistants.err.jsonList" } };
  if (shape === "object" && (typeof value !== "object" || value === null || Array.isArray(value))) {
    return { problem: { key: "assistants.err.jsonObject" } };
  }
  return { value };
}

/** Stable JSON (object keys sorted) to compare two values. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) => {
    if (item && typeof item === "object" && !Array.isArray(item)) {
      return Object.fromEntries(
        Object.entries(item as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
      );
    }
    return item;
  });
}

/** The PATCH body: the fields of `next` that differ from `before` (each sent whole, as
 * the API replaces them whole). */
export function changedFields(before: AssistantPayload, next: AssistantPayload): Partial<AssistantPayload> {
  const patch: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(next)) {
    if (canonical(value) !== canonical((before as unknown as Record<string, unknown>)[key])) {
      patch[key] = value;
    }
  }
  return patch as Partial<AssistantPayload>;
}

/** The server's `param` (`sampling.temperature`, `tools.2`, `memory.scope`) -> the form
 * field it names, so its error shows beside that field. */
export function fieldOf(param: string | null | undefined): string {
  if (!param) return "form";
  const [head, second] = param.split(".");
  if (head === "sampling") {
    if (second && (NUMBER_FIELDS as readonly string[]).includes(second)) return second;
    return second === "stop" ? "stop" : "sampling";
  }
  if (head === "memory") return "memory";
  const known = [
    "name",
    "description",
    "system_prompt",
    "model",
    "reasoning_effort",
    "tools",
    "tool_policies",
    "knowledge_bases",
    "mcp_servers",
    "regex_rules",
    "transformers",
    "generate_titles",
    "generate_suggestions",
  ];
  return known.includes(head) ? head : "form";
}
