// The form that creates or edits one assistant. What the server refuses is shown beside
// the field its `param` names (and in a summary at the top of the form).
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { api, ApiError } from "../../api";
import { errorText } from "../../components/ErrorNote";
import { t } from "../../i18n";
import {
  BUILTIN_TOOLS,
  changedFields,
  EFFORTS,
  emptyForm,
  fieldOf,
  fromAssistant,
  NUMBER_FIELDS,
  POLICIES,
  toPayload,
  type AssistantForm,
  type NumberField,
  type PolicyRow,
} from "./assistantForm";
import { listKnowledgeBases, listMcpServers, listModels, useLoad } from "./data";
import { CheckGroup, describedBy, Field, FieldError, problemText, Switch, type Choice, type Problem } from "./fields";
import type { AssistantRecord, MemoryScope, ReasoningEffort, ToolPolicy } from "./types";

const OTHER = "\u0000other";

const NUMBER_LABELS: Record<NumberField, Parameters<typeof t>[0]> = {
  temperature: "assistants.temperature",
  top_p: "assistants.topP",
  max_tokens: "assistants.maxTokens",
  seed: "assistants.seed",
  presence_penalty: "assistants.presencePenalty",
  frequency_penalty: "assistants.frequencyPenalty",
};
const NUMBER_STEPS: Record<NumberField, string> = {
  temperature: "0.1",
  top_p: "0.05",
  max_tokens: "1",
  seed: "1",
  presence_penalty: "0.1",
  frequency_penalty: "0.1",
};

interface Props {
  assistant: AssistantRecord | null;
  onSaved: (assistant: AssistantRecord) => void;
  onCancel: () => void;
}

export function AssistantEditor({ assistant, onSaved, onCancel }: Props) {
  const initial = useMemo(() => (assistant ? fromAssistant(assistant) : emptyForm()), [assistant]);
  const [form, setForm] = useState<AssistantForm>(initial);
  const [problems, setProblems] = useState<Record<string, Problem>>({});
  const [busy, setBusy] = useState(false);
  const summary = useRef<HTMLDivElement>(null);
  const models = useLoad(listModels);
  const bases = useLoad(listKnowledgeBases);
  const servers = useLoad(listMcpServers);
  const [otherModel, setOtherModel] = useState(false);

  // a model the list does not name (or no list at all): typed as free text
  const modelList = models.data ?? (form.model ? [form.model] : []);
  const modelIsOther = otherModel || (form.model !== "" && models.data !== undefined && !modelList.includes(form.model));
  const noModelList = models.data === undefined && !models.loading;

  function update(change: Partial<AssistantForm>) {
    setForm((current) => ({ ...current, ...change }));
  }
  function setNumber(field: NumberField, value: string) {
    setForm((current) => ({ ...current, numbers: { ...current.numbers, [field]: value } }));
  }
  function setPolicies(rows: PolicyRow[]) {
    update({ policies: rows });
  }

  useEffect(() => {
    if (Object.keys(problems).length) summary.current?.focus();
  }, [problems]);

  async function submit(event: Event) {
    event.preventDefault();
    const { payload, errors } = toPayload(form);
    if (Object.keys(errors).length) {
      setProblems(errors as Record<string, Problem>);
      return;
    }
    setProblems({});
    setBusy(true);
    try {
      let saved: AssistantRecord;
      if (assistant) {
        const before = toPayload(fromAssistant(assistant)).payload;
        const patch = changedFields(before, payload);
        saved = Object.keys(patch).length
          ? await api<AssistantRecord>(`/v1/assistants/${encodeURIComponent(assistant.id)}`, {
              method: "PATCH",
              body: patch,
            })
          : assistant;
      } else {
        saved = await api<AssistantRecord>("/v1/assistants", { method: "POST", body: payload });
      }
      onSaved(saved);
    } catch (caught) {
      const field = caught instanceof ApiError ? fieldOf(caught.param) : "form";
      setProblems({ [field]: { text: errorText(caught) } });
    } finally {
      setBusy(false);
    }
  }

  const p = (field: string) => problems[field];
  const invalid = (field: string) => (problems[field] ? true : undefined);

  // tools: the built-ins, plus what the assistant already has beyond them
  const policyOptions = [
    ...BUILTIN_TOOLS,
    ...(servers.data ?? []).map((server) => `mcp__${server.name}__*`),
  ];

  const baseChoices: Choice[] = (bases.data ?? []).map((kb) => ({ value: kb.id, label: kb.name }));
  for (const ref of form.knowledge_bases) {
    if (bases.data && !bases.data.some((kb) => kb.id === ref || kb.name === ref)) {
      baseChoices.push({ value: ref, label: ref, note: t("assistants.notFound") });
    }
  }
  const serverChoices: Choice[] = (servers.data ?? []).map((server) => ({
    value: server.name,
    label: server.name,
    note: server.enabled === false ? t("mcp.disabled") : undefined,
  }));
  for (const name of form.mcp_servers) {
    if (!serverChoices.some((c) => c.value === name)) {
      serverChoices.push({ value: name, label: name, note: t("assistants.notFound") });
    }
  }

  const problemList = Object.entries(problems);
  return (
    <form class="settings-form" onSubmit={submit} noValidate aria-busy={busy}>
      {problemList.length > 0 && (
        <div class="error-note form-summary" role="alert" tabIndex={-1} ref={summary}>
          <p>{t("assistants.fixProblems")}</p>
          <ul>
            {problemList.map(([field, problem]) => (
              <li key={field}>
                {field === "form" ? "" : `${fieldLabel(field)}: `}
                {problemText(problem)}
              </li>
            ))}
          </ul>
        </div>
      )}

      <fieldset class="section">
        <legend>{t("assistants.basics")}</legend>
        <Field id="asst-name" label={t("assistants.name")} problem={p("name")}>
          <input
            id="asst-name"
            required
            maxLength={100}
            value={form.name}
            aria-invalid={invalid("name")}
            aria-describedby={describedBy("asst-name", false, p("name"))}
            onInput={(e) => update({ name: e.currentTarget.value })}
          />
        </Field>
        <Field id="asst-description" label={t("assistants.description")} problem={p("description")}>
          <input
            id="asst-description"
            maxLength={2000}
            value={form.description}
            aria-invalid={invalid("description")}
            aria-describedby={describedBy("asst-description", false, p("description"))}
            onInput={(e) => update({ description: e.currentTarget.value })}
          />
        </Field>
        <Field
          id="asst-prompt"
          label={t("assistants.systemPrompt")}
          hint={t("assistants.systemPromptHint")}
          problem={p("system_prompt")}
          wide
        >
          <textarea
            id="asst-prompt"
            rows={8}
            value={form.system_prompt}
            aria-invalid={invalid("system_prompt")}
            aria-describedby={describedBy("asst-prompt", true, p("system_prompt"))}
            onInput={(e) => update({ system_prompt: e.currentTarget.value })}
          />
        </Field>
      </fieldset>

      <fieldset class="section">
        <legend>{t("assistants.modelSection")}</legend>
        {!noModelList && (
          <Field id="asst-model" label={t("assistants.model")} problem={modelIsOther ? undefined : p("model")}>
            <select
              id="asst-model"
              value={modelIsOther ? OTHER : form.model}
              aria-invalid={modelIsOther ? undefined : invalid("model")}
              aria-describedby={describedBy("asst-model", false, modelIsOther ? undefined : p("model"))}
              onChange={(e) => {
                const value = e.currentTarget.value;
                if (value === OTHER) {
                  setOtherModel(true);
                } else {
                  setOtherModel(false);
                  update({ model: value });
                }
              }}
            >
              <option value="">{t("assistants.defaultModel")}</option>
              {modelList.map((id) => (
                <option key={id} value={id}>
                  {id}
                </option>
              ))}
              <option value={OTHER}>{t("assistants.otherModel")}</option>
            </select>
          </Field>
        )}
        {(modelIsOther || noModelList) && (
          <Field
            id="asst-model-name"
            label={t("assistants.modelName")}
            hint={noModelList ? t("assistants.modelsUnavailable") : t("assistants.modelNameHint")}
            problem={p("model")}
          >
            <input
              id="asst-model-name"
              value={form.model}
              spellcheck={false}
              aria-invalid={invalid("model")}
              aria-describedby={describedBy("asst-model-name", true, p("model"))}
              onInput={(e) => update({ model: e.currentTarget.value })}
            />
          </Field>
        )}
        <Field id="asst-effort" label={t("assistants.reasoningEffort")} problem={p("reasoning_effort")}>
          <select
            id="asst-effort"
            value={form.reasoning_effort}
            aria-invalid={invalid("reasoning_effort")}
            onChange={(e) => update({ reasoning_effort: e.currentTarget.value as ReasoningEffort | "" })}
          >
            <option value="">{t("assistants.notSet")}</option>
            {EFFORTS.map((effort) => (
              <option key={effort} value={effort}>
                {t(`assistants.effort.${effort}`)}
              </option>
            ))}
          </select>
        </Field>
        <div class="field-grid">
          {NUMBER_FIELDS.map((field) => {
            const id = `asst-${field}`;
            return (
              <Field key={field} id={id} label={t(NUMBER_LABELS[field])} problem={p(field)}>
                <input
                  id={id}
                  type="number"
                  inputMode={field === "max_tokens" || field === "seed" ? "numeric" : "decimal"}
                  step={NUMBER_STEPS[field]}
                  placeholder={t("assistants.notSet")}
                  value={form.numbers[field]}
                  aria-invalid={invalid(field)}
                  aria-describedby={describedBy(id, false, p(field))}
                  onInput={(e) => setNumber(field, e.currentTarget.value)}
                />
              </Field>
            );
          })}
        </div>
        <Field id="asst-stop" label={t("assistants.stop")} hint={t("assistants.stopHint")} problem={p("stop")}>
          <textarea
            id="asst-stop"
            rows={2}
            value={form.stop}
            aria-invalid={invalid("stop")}
            aria-describedby={describedBy("asst-stop", true, p("stop"))}
            onInput={(e) => update({ stop: e.currentTarget.value })}
          />
        </Field>
        {p("sampling") && <FieldError id="asst-sampling-error" problem={p("sampling")} />}
      </fieldset>

      <fieldset class="section">
        <legend>{t("assistants.toolsSection")}</legend>
        <CheckGroup
          id="asst-tools"
          legend={t("assistants.serverTools")}
          hint={t("assistants.serverToolsHint")}
          choices={BUILTIN_TOOLS.map((name) => ({ value: name, label: name }))}
          chosen={form.tools}
          onChange={(tools) => update({ tools })}
        />
        <Field
          id="asst-extra-tools"
          label={t("assistants.otherTools")}
          hint={t("assistants.otherToolsHint")}
          problem={p("tools")}
        >
          <input
            id="asst-extra-tools"
            spellcheck={false}
            value={form.extra_tools}
            aria-invalid={invalid("tools")}
            aria-describedby={describedBy("asst-extra-tools", true, p("tools"))}
            onInput={(e) => update({ extra_tools: e.currentTarget.value })}
          />
        </Field>
        <PolicyEditor
          rows={form.policies}
          options={policyOptions}
          onChange={setPolicies}
          problem={p("tool_policies")}
        />
        <CheckGroup
          id="asst-mcp"
          legend={t("assistants.mcpServers")}
          hint={t("assistants.mcpServersHint")}
          empty={servers.error ? t("assistants.mcpUnavailable") : t("assistants.noMcpServers")}
          choices={serverChoices}
          chosen={form.mcp_servers}
          onChange={(mcp_servers) => update({ mcp_servers })}
          problem={p("mcp_servers")}
        />
      </fieldset>

      <fieldset class="section">
        <legend>{t("assistants.knowledgeAndMemory")}</legend>
        <CheckGroup
          id="asst-kb"
          legend={t("assistants.knowledgeBases")}
          hint={t("assistants.knowledgeBasesHint")}
          empty={bases.error ? t("assistants.kbUnavailable") : t("assistants.noKnowledgeBases")}
          choices={baseChoices}
          chosen={form.knowledge_bases}
          onChange={(knowledge_bases) => update({ knowledge_bases })}
          isChosen={(choice) => {
            const kb = bases.data?.find((b) => b.id === choice.value);
            return form.knowledge_bases.includes(choice.value) || (!!kb && form.knowledge_bases.includes(kb.name));
          }}
          onToggle={(choice, on) => {
            const kb = bases.data?.find((b) => b.id === choice.value);
            const refs = new Set([choice.value, ...(kb ? [kb.name] : [])]);
            update({
              knowledge_bases: on
                ? [...form.knowledge_bases, choice.value]
                : form.knowledge_bases.filter((ref) => !refs.has(ref)),
            });
          }}
          problem={p("knowledge_bases")}
        />
        <fieldset class="group" aria-describedby={p("memory") ? "asst-memory-error" : undefined}>
          <legend>{t("assistants.memory")}</legend>
          <Switch
            id="asst-memory"
            label={t("assistants.memoryEnabled")}
            hint={t("assistants.memoryEnabledHint")}
            checked={form.memory_enabled}
            onChange={(memory_enabled) => update({ memory_enabled })}
          />
          <Switch
            id="asst-memory-retrieval"
            label={t("assistants.memoryRetrieval")}
            hint={t("assistants.memoryRetrievalHint")}
            checked={form.memory_retrieval}
            disabled={!form.memory_enabled}
            onChange={(memory_retrieval) => update({ memory_retrieval })}
          />
          <Field id="asst-memory-scope" label={t("assistants.memoryScope")}>
            <select
              id="asst-memory-scope"
              value={form.memory_scope}
              disabled={!form.memory_enabled}
              onChange={(e) => update({ memory_scope: e.currentTarget.value as MemoryScope })}
            >
              <option value="assistant">{t("assistants.scopeAssistant")}</option>
              <option value="global">{t("assistants.scopeGlobal")}</option>
            </select>
          </Field>
          <FieldError id="asst-memory-error" problem={p("memory")} />
        </fieldset>
      </fieldset>

      <fieldset class="section">
        <legend>{t("assistants.extras")}</legend>
        <Switch
          id="asst-titles"
          label={t("assistants.generateTitles")}
          checked={form.generate_titles}
          onChange={(generate_titles) => update({ generate_titles })}
        />
        <Switch
          id="asst-suggestions"
          label={t("assistants.generateSuggestions")}
          checked={form.generate_suggestions}
          onChange={(generate_suggestions) => update({ generate_suggestions })}
        />
        <details class="advanced" open={!!(p("regex_rules") || p("transformers"))}>
          <summary>{t("assistants.advanced")}</summary>
          <p class="hint">{t("assistants.advancedHint")}</p>
          <Field id="asst-regex" label={t("assistants.regexRules")} problem={p("regex_rules")} wide>
            <textarea
              id="asst-regex"
              class="code"
              rows={6}
              spellcheck={false}
              value={form.regex_rules}
              aria-invalid={invalid("regex_rules")}
              aria-describedby={describedBy("asst-regex", false, p("regex_rules"))}
              onInput={(e) => update({ regex_rules: e.currentTarget.value })}
            />
          </Field>
          <Field id="asst-transformers" label={t("assistants.transformers")} problem={p("transformers")} wide>
            <textarea
              id="asst-transformers"
              class="code"
              rows={8}
              spellcheck={false}
              value={form.transformers}
              aria-invalid={invalid("transformers")}
              aria-describedby={describedBy("asst-transformers", false, p("transformers"))}
              onInput={(e) => update({ transformers: e.currentTarget.value })}
            />
          </Field>
        </details>
      </fieldset>

      <div class="form-actions">
        <button type="submit" class="primary" disabled={busy}>
          {assistant ? t("assistants.saveChanges") : t("assistants.create")}
        </button>
        <button type="button" onClick={onCancel}>
          {t("common.cancel")}
        </button>
      </div>
    </form>
  );
}

function fieldLabel(field: string): string {
  switch (field) {
    case "name":
      return t("assistants.name");
    case "description":
      return t("assistants.description");
    case "system_prompt":
      return t("assistants.systemPrompt");
    case "model":
      return t("assistants.model");
    case "reasoning_effort":
      return t("assistants.reasoningEffort");
    case "stop":
      return t("assistants.stop");
    case "tools":
      return t("assistants.otherTools");
    case "tool_policies":
      return t("assistants.policies");
    case "knowledge_bases":
      return t("assistants.knowledgeBases");
    case "mcp_servers":
      return t("assistants.mcpServers");
    case "memory":
      return t("assistants.memory");
    case "regex_rules":
      return t("assistants.regexRules");
    case "transformers":
      return t("assistants.transformers");
    case "sampling":
      return t("assistants.modelSection");
    case "generate_titles":
      return t("assistants.generateTitles");
    case "generate_suggestions":
      return t("assistants.generateSuggestions");
    default:
      if ((NUMBER_FIELDS as readonly string[]).includes(field)) return t(NUMBER_LABELS[field as NumberField]);
      return field;
  }
}

/** Tool name or glob -> auto, ask or deny: one row each. */
export function PolicyEditor({
  rows,
  options,
  onChange,
  problem,
}: {
  rows: PolicyRow[];
  options: string[];
  onChange: (rows: PolicyRow[]) => void;
  problem?: Problem;
}) {
  const set = (index: number, change: Partial<PolicyRow>) =>
    onChange(rows.map((row, i) => (i === index ? { ...row, ...change } : row)));
  return (
    <fieldset class="group policies" aria-describedby={describedBy("asst-policies", true, problem)}>
      <legend>{t("assistants.policies")}</legend>
      <p id="asst-policies-hint" class="hint">
        {t("assistants.policiesHint")}
      </p>
      <datalist id="asst-tool-names">
        {options.map((name) => (
          <option key={name} value={name} />
        ))}
      </datalist>
      {rows.length > 0 && (
        <ul class="policy-rows">
          {rows.map((row, index) => {
            const n = index + 1;
            return (
              <li key={index} class="policy-row">
                <label class="visually-hidden" for={`asst-policy-tool-${n}`}>
                  {t("assistants.policyTool", { n })}
                </label>
                <input
                  id={`asst-policy-tool-${n}`}
                  list="asst-tool-names"
                  spellcheck={false}
                  placeholder={t("assistants.policyToolPlaceholder")}
                  value={row.pattern}
                  onInput={(e) => set(index, { pattern: e.currentTarget.value })}
                />
                <label class="visually-hidden" for={`asst-policy-value-${n}`}>
                  {t("assistants.policyValue", { n })}
                </label>
                <select
                  id={`asst-policy-value-${n}`}
                  value={row.policy}
                  onChange={(e) => set(index, { policy: e.currentTarget.value as ToolPolicy })}
                >
                  {POLICIES.map((policy) => (
                    <option key={policy} value={policy}>
                      {t(`assistants.policy.${policy}`)}
                    </option>
                  ))}
                </select>
                <button
                  type="button"
                  class="icon"
                  aria-label={t("assistants.removePolicy", { n })}
                  onClick={() => onChange(rows.filter((_, i) => i !== index))}
                >
                  ✕
                </button>
              </li>
            );
          })}
        </ul>
      )}
      <button type="button" onClick={() => onChange([...rows, { pattern: "", policy: "ask" }])}>
        + {t("assistants.addPolicy")}
      </button>
      <FieldError id="asst-policies-error" problem={problem} />
    </fieldset>
  );
}
