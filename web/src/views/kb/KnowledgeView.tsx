export function KnowledgeView({ kbId }: { kbId: string | null }) {
  return <section class="kb">{kbId}</section>;
}
