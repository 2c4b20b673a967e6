// The model's reasoning as a collapsible block: open while the reasoning streams, closed
// once the answer begins (the reader can open it again), with how long it took.
import { useEffect, useRef, useState } from "preact/hooks";
import { t } from "../i18n";
import { Markdown } from "./Markdown";
import "./message.css";

export interface ReasoningProps {
  text: string;
  /** The reasoning is still arriving (no answer text yet). */
  streaming?: boolean;
  /** How long the model reasoned, when known. */
  seconds?: number | null;
}

/** 0.4 -> "0.4", 12.3 -> "12". */
export function formatSeconds(seconds: number): string {
  return seconds < 10 ? String(Math.round(seconds * 10) / 10) : String(Math.round(seconds));
}

export function Reasoning({ text, streaming = false, seconds }: ReasoningProps) {
  const [open, setOpen] = useState(streaming);
  const details = useRef<HTMLDetailsElement>(null);
  // Follow the stream: open when reasoning starts, collapse when the answer begins.
  useEffect(() => setOpen(streaming), [streaming]);
  // Follow the reader's clicks on the summary.
  useEffect(() => {
    const element = details.current!;
    const onToggle = () => setOpen(element.open);
    element.addEventListener("toggle", onToggle);
    return () => element.removeEventListener("toggle", onToggle);
  }, []);
  const label = streaming
    ? t("msg.reasoning.live")
    : seconds != null && seconds > 0
      ? t("msg.reasoning.seconds", { seconds: formatSeconds(seconds) })
      : t("msg.reasoning");
  return (
    <details ref={details} open={open} class={streaming ? "reasoning live" : "reasoning"}>
      <summary>{label}</summary>
      {/* Closed, it costs nothing: the text is rendered only while it can be seen. */}
      {open && <Markdown text={text} streaming={streaming} class="reasoning-text" />}
    </details>
  );
}
