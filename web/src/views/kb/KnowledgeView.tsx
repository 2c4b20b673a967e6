// The knowledge-base screens: /kb lists the caller's bases, /kb/{id} opens one.
import { BaseDetail } from "./BaseDetail";
import { BaseList } from "./BaseList";
import "./kb.css";

export function KnowledgeView({ kbId }: { kbId: string | null }) {
  return kbId ? <BaseDetail key={kbId} kbId={kbId} /> : <BaseList />;
}
