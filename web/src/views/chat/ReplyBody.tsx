// An assistant reply's body, live or stored: reasoning, text and tool cards in the order
// the agent produced them, images, the sources cited, and notes (Parley's notes, why the
// agent stopped, the error of a reply that failed), all as readable text.
import { t } from "../../i18n";
import { displayableImage } from "./messages";
import type { ReplyState, Segment } from "./reply";
import { Markdown } from "../../components/Markdown";
import { Reasoning } from "../../components/Reasoning";
import { Sources } from "../../components/Sources";
import { ToolCard, type ToolCall as CardCall } from "../../components/ToolCard";
import type { ToolCall } from "./reply";

interface Props {
  state: ReplyState;
  /** The reply is being written (its last block grows). */
  streaming: boolean;
  /** Ids of this reply's source list items: `{citePrefix}-{n}`. */
  citePrefix: string;
  /** Tool calls waiting for a decision are shown as approval cards instead. */
  hidePending: boolean;
  notes?: string[];
  /** The error only repeats the reply's status (a stopped reply's "cancelled"). */
  quietError?: boolean;
}

function SegmentView({ segment, last, props }: { segment: Segment; last: boolean; props: Props }) {
  const { state, streaming, citePrefix } = props;
  switch (segment.kind) {
    case "text":
      return (
        <Markdown
          text={segment.text}
          streaming={streaming && last}
          citePrefix={citePrefix}
          citeCount={state.citations.length}
        />
      );
    case "reasoning":
      return <Reasoning text={segment.text} streaming={streaming && last} />;
    case "image":
      return displayableImage(segment.url) ? (
        <img class="reply-image" src={segment.url} alt={t("chat.imageAlt")} loading="lazy" />
      ) : null;
    case "tool": {
      const call = state.tools[segment.id];
      if (!call) return null;
      if (props.hidePending && call.approval === "pending" && call.output === null) return null;
      return <ToolCard call={cardCall(call)} />;
    }
  }
}

/** A tool call as the shared card takes it. */
export function cardCall(call: ToolCall): CardCall {
  return {
    id: call.id,
    name: call.name,
    arguments: call.arguments,
    output: call.output,
    isError: call.isError,
    seconds: call.seconds,
    running: call.running,
    approval: call.approval ? { state: call.approval, reason: call.approvalReason ?? null } : null,
  };
}

function Waiting({ activity }: { activity: string | null }) {
  return (
    <p class="reply-waiting">
      <span class="dots" aria-hidden="true">
        <span />
        <span />
        <span />
      </span>
      {activity === "thinking" ? t("chat.thinking") : t("chat.writing")}
    </p>
  );
}

export function Notes({ notes }: { notes: string[] }) {
  if (!notes.length) return null;
  return (
    <ul class="reply-notes" aria-label={t("chat.notes")}>
      {notes.map((note, i) => (
        <li key={i}>{note}</li>
      ))}
    </ul>
  );
}

export function ReplyBody(props: Props) {
  const { state, streaming, citePrefix } = props;
  const segments = state.segments;
  const lastIndex = segments.length - 1;
  const notes = props.notes ?? state.notes;
  return (
    <div class="reply-body">
      {segments.map((segment, i) => (
        <SegmentView key={segment.kind === "tool" ? segment.id : i} segment={segment} last={i === lastIndex} props={props} />
      ))}
      {streaming && (state.phase === "waiting" || state.activity || segments[lastIndex]?.kind === "tool") && (
        <Waiting activity={state.activity} />
      )}
      {state.citations.length > 0 && <Sources citations={state.citations} prefix={citePrefix} />}
      <Notes notes={notes} />
      {state.stopped && <p class="reply-note">{t("chat.stoppedEarly", { message: state.stopped.message })}</p>}
      {state.error && !props.quietError && <p class="reply-error">{state.error.message}</p>}
    </div>
  );
}
