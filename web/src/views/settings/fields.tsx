// Small form pieces: a labelled field with its error beside it, a switch, a checkbox
// group. Every text is a text node (Preact escapes it), never HTML.
import type { ComponentChildren } from "preact";
import { t, type Key } from "../../i18n";
/** A problem to show: one of the form's own (a message key and its variables) or the
 * server's message. */
export type Problem = { key: string; vars?: Record<string, string | number> } | { text: string };

export function problemText(problem: Problem): string {
  return "text" in problem ? problem.text : t(problem.key as Key, problem.vars);
}

export function FieldError({ id, problem }: { id: string; problem?: Problem }) {
  if (!problem) return null;
  return (
    <p id={id} class="field-error" role="alert">
      {problemText(problem)}
    </p>
  );
}

interface FieldProps {
  id: string;
  label: string;
  hint?: string;
  problem?: Problem;
  children: ComponentChildren;
  wide?: boolean;
}

/** A label, the control (whose id is `id`), a hint, and the error if any. The control
 * should carry `describedBy(id, ...)` and `aria-invalid`. */
export function Field({ id, label, hint, problem, children, wide }: FieldProps) {
  return (
    <div class={wide ? "field wide" : "field"}>
      <label for={id}>{label}</label>
      {children}
      {hint && (
        <p id={`${id}-hint`} class="hint field-hint">
          {hint}
        </p>
      )}
      <FieldError id={`${id}-error`} problem={problem} />
    </div>
  );
}

/** aria-describedby for a field's control: its hint and its error. */
export function describedBy(id: string, hint: boolean, problem: unknown): string | undefined {
  const ids = [hint ? `${id}-hint` : "", problem ? `${id}-error` : ""].filter(Boolean);
  return ids.length ? ids.join(" ") : undefined;
}

export function Switch({
  id,
  label,
  checked,
  onChange,
  hint,
  disabled,
}: {
  id: string;
  label: string;
  checked: boolean;
  onChange: (value: boolean) => void;
  hint?: string;
  disabled?: boolean;
}) {
  return (
    <div class="check">
      <input
        id={id}
        type="checkbox"
        checked={checked}
        disabled={disabled}
        aria-describedby={hint ? `${id}-hint` : undefined}
        onChange={(e) => onChange(e.currentTarget.checked)}
      />
      <label for={id}>{label}</label>
      {hint && (
        <p id={`${id}-hint`} class="hint check-hint">
          {hint}
        </p>
      )}
    </div>
  );
}

export interface Choice {
  value: string;
  label: string;
  note?: string;
}

/** Checkboxes in a fieldset: the values chosen, in the order they were chosen. */
export function CheckGroup({
  id,
  legend,
  choices,
  chosen,
  onChange,
  empty,
  hint,
  problem,
  isChosen,
  onToggle,
}: {
  id: string;
  legend: string;
  choices: Choice[];
  chosen: string[];
  onChange: (values: string[]) => void;
  empty?: string;
  hint?: string;
  problem?: Problem;
  isChosen?: (choice: Choice) => boolean;
  onToggle?: (choice: Choice, on: boolean) => void;
}) {
  const has = isChosen ?? ((choice: Choice) => chosen.includes(choice.value));
  const toggle =
    onToggle ??
    ((choice: Choice, on: boolean) =>
      onChange(on ? [...chosen, choice.value] : chosen.filter((v) => v !== choice.value)));
  return (
    <fieldset class="group" aria-describedby={describedBy(id, !!hint, problem)}>
      <legend>{legend}</legend>
      {hint && (
        <p id={`${id}-hint`} class="hint">
          {hint}
        </p>
      )}
      {choices.length === 0 && empty && <p class="hint">{empty}</p>}
      <div class="choices">
        {choices.map((choice, index) => (
          <div class="check" key={choice.value}>
            <input
              id={`${id}-${index}`}
              type="checkbox"
              checked={has(choice)}
              onChange={(e) => toggle(choice, e.currentTarget.checked)}
            />
            <label for={`${id}-${index}`}>
              {choice.label}
              {choice.note && <span class="hint"> ({choice.note})</span>}
            </label>
          </div>
        ))}
      </div>
      <FieldError id={`${id}-error`} problem={problem} />
    </fieldset>
  );
}
