// Loading helpers shared by the assistants, memory and settings screens.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api } from "../../api";
import type { Page } from "../../types";
import type { McpServer, NamedRecord } from "./types";

/** Every row of a paged list (`limit`/`after`), up to `maxPages` pages of 100. */
export async function listAll<T extends { id: string }>(
  path: string,
  query: Record<string, string | undefined> = {},
  maxPages = 20,
): Promise<T[]> {
  const rows: T[] = [];
  let after: string | undefined;
  for (let n = 0; n < maxPages; n++) {
    const page = await api<Page<T>>(path, { query: { ...query, limit: 100, after } });
    rows.push(...page.data);
    if (!page.has_more || page.data.length === 0) break;
    after = page.data[page.data.length - 1].id;
  }
  return rows;
}

export const listAssistants = () => listAll<NamedRecord & Record<string, unknown>>("/v1/assistants");
export const listKnowledgeBases = () => listAll<NamedRecord>("/v1/knowledge_bases");
export async function listModels(): Promise<string[]> {
  const page = await api<{ data: { id: string }[] }>("/v1/models");
  return [...new Set(page.data.map((m) => m.id))];
}
export async function listMcpServers(): Promise<McpServer[]> {
  const page = await api<{ data: McpServer[] }>("/v1/mcp/servers");
  return page.data;
}

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
  set: (value: T) => void;
}

/** Runs `load` on mount (and when `deps` change); the newest answer wins. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const generation = useRef(0);
  const reload = useCallback(() => {
    const mine = ++generation.current;
    setLoading(true);
    load().then(
      (value) => {
        if (mine !== generation.current) return;
        setData(value);
        setError(null);
        setLoading(false);
      },
      (caught: unknown) => {
        if (mine !== generation.current) return;
        setError(caught);
        setLoading(false);
      },
    );
  }, deps);
  useEffect(() => {
    reload();
    return () => {
      generation.current++;
    };
  }, [reload]);
  return { data, error, loading, reload, set: setData };
}

/** A date a person reads, in the page's language. */
export function when(seconds: number | null | undefined, language: string): string {
  if (!seconds) return "";
  return new Date(seconds * 1000).toLocaleString(language === "zh" ? "zh-CN" : "en", {
    dateStyle: "medium",
    timeStyle: "short",
  });
}
