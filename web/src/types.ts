// The shapes of Parley's API the page reads (see README "The API").

export interface Session {
  object: "session";
  keys_required: boolean;
  signed_in: boolean;
  owner: string | null;
  key_id: string | null;
  key_name: string | null;
  admin: boolean;
}

export interface Page<T> {
  object: "list";
  data: T[];
  has_more: boolean;
  first_id?: string | null;
  last_id?: string | null;
}

export interface ConversationSummary {
  id: string;
  object: "conversation";
  title: string | null;
  created_at: number;
  updated_at: number;
}

export interface ToolResult {
  content: string;
  is_error: boolean;
  started_at?: number;
  seconds?: number;
}

export type Part =
  | { kind: "text"; text: string }
  | { kind: "image"; url: string; detail?: string | null }
  | { kind: "file"; name: string; data: string; media_type: string }
  | { kind: "reasoning"; text: string; signature?: string | null }
  | {
      kind: "tool_call";
      id: string;
      name: string;
      arguments: string;
      result: ToolResult | null;
      approval?: string | null;
      approval_reason?: string | null;
      asked_at?: number;
    }
  | { kind: "citation"; source_id: string; title: string; excerpt: string; score: number };

export interface Citation {
  rank: number;
  source: string;
  chunk_id: number | string | null;
  document_id: string | null;
  knowledge_base_id: string | null;
  title: string;
  score: number | null;
  excerpt: string;
  page: number | null;
  section: string | null;
}

export interface Versions {
  count: number;
  index: number;
  ids: string[];
}

export interface PendingApproval {
  id: string;
  tool: string;
  arguments: string;
  expires_at?: number | null;
  expired?: boolean;
}

export interface Usage {
  input_tokens?: number;
  output_tokens?: number;
  reasoning_tokens?: number;
  cached_input_tokens?: number;
  cost_usd?: number | null;
  [key: string]: unknown;
}

export interface StoredMessage {
  id: string;
  object: "conversation.message";
  parent_id: string | null;
  role: "user" | "assistant" | "system" | "tool";
  content: string;
  parts: Part[];
  status: string;
  model: string | null;
  usage: Usage | null;
  finish_reason: string | null;
  error: string | Record<string, unknown> | null;
  created_at: number;
  updated_at: number;
  versions?: Versions;
  citations?: Citation[];
  pending_approvals?: PendingApproval[];
}

export interface ConversationDetail extends ConversationSummary {
  messages: StoredMessage[];
  suggestions: string[];
}

export interface ToolProgress {
  phase: "start" | "end";
  id: string;
  name: string;
  arguments: string;
  tool_output?: string | null;
  is_error?: boolean;
  seconds?: number;
}

export interface Cost {
  response_usd: number;
  conversation_usd: number;
  complete: boolean;
}

export interface ParleyExtension {
  conversation_id: string;
  message_id: string;
  cost?: Cost;
  notes?: string[];
  citations?: Citation[];
  pending_approvals?: PendingApproval[];
  stopped?: { code: string; message: string };
  tool?: ToolProgress;
  restart?: { reason: string; clear: boolean; keep_content_chars?: number | null };
}

export interface ChatChunk {
  id: string;
  model: string;
  choices: {
    index: number;
    delta: { role?: string; content?: string | null; reasoning_content?: string | null };
    finish_reason: string | null;
  }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
  parley?: ParleyExtension;
}

export interface Model {
  id: string;
  object: "model";
  owned_by?: string;
}

export interface Assistant {
  id: string;
  name: string;
  [key: string]: unknown;
}

export interface KnowledgeBase {
  id: string;
  name: string;
  [key: string]: unknown;
}
