// The API shapes the assistants, memory and settings screens read (README "The API";
// src/parley/api/{assistants,memories,mcp,usage}.py).

export type ToolPolicy = "auto" | "ask" | "deny";
export type ReasoningEffort = "low" | "medium" | "high" | "max";
export type MemoryScope = "assistant" | "global";

export interface Sampling {
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  seed?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  stop?: string[];
  logit_bias?: Record<string, number>;
}

export interface RegexRule {
  pattern: string;
  replacement: string;
  roles: ("user" | "assistant")[];
  display_only: boolean;
}

export interface AssistantRecord {
  id: string;
  object: "assistant";
  name: string;
  description: string;
  system_prompt: string;
  model: string | null;
  sampling: Sampling;
  reasoning_effort: ReasoningEffort | null;
  tools: string[];
  tool_policies: Record<string, ToolPolicy>;
  knowledge_bases: string[];
  mcp_servers: string[];
  memory: { enabled: boolean; retrieval: boolean; scope: MemoryScope };
  regex_rules: RegexRule[];
  transformers: Record<string, unknown>;
  generate_titles: boolean;
  generate_suggestions: boolean;
  created_at: number;
  updated_at: number;
}

export interface MemoryRecord {
  id: string;
  object: "memory";
  text: string;
  assistant_id: string | null;
  source: string | null;
  conversation_id: string | null;
  created_at: number;
  updated_at: number;
  score?: number;
}

export interface McpConfig {
  transport: "stdio" | "http" | "sse";
  command: string | null;
  args: string[];
  cwd: string | null;
  env: Record<string, string>;
  url: string | null;
  headers: Record<string, string>;
  bearer_token: string | null;
  bearer_token_env: string | null;
  timeout: number;
  enabled: boolean;
}

export interface McpServer {
  name: string;
  object: "mcp.server";
  source: "config" | "api" | null;
  transport: "stdio" | "http" | "sse" | null;
  enabled: boolean | null;
  connected: boolean | null;
  tool_count: number | null;
  latency_ms: number | null;
  quarantined_for_seconds: number | null;
  consecutive_failures: number | null;
  skipped_tools: { name: string; reason: string }[];
  created_at: number | null;
  /** admins only */
  last_error?: string | null;
  refused?: string | null;
  config?: McpConfig | null;
}

export interface McpTool {
  name: string;
  object: "mcp.tool";
  tool: string;
  description: string | null;
  parameters?: unknown;
}

export interface UsagePeriod {
  period: string;
  tokens: number;
  cost_usd: number;
  calls: number;
  limit_tokens: number | null;
  limit_cost_usd: number | null;
  resets_at: string;
}

export interface UsageReport {
  object: "usage";
  key_id: string | null;
  key_name: string | null;
  limits_enabled: boolean;
  day: UsagePeriod;
  month: UsagePeriod;
}

export interface ApiKeyRecord {
  id: string;
  name: string;
  owner?: string;
  prefix?: string;
  admin?: boolean;
  created_at?: number;
  revoked_at?: number | null;
  /** only in the answer to POST /v1/keys, once */
  key?: string;
}

export interface NamedRecord {
  id: string;
  name: string;
}
