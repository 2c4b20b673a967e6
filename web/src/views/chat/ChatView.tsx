export function ChatView({ conversationId }: { conversationId: string | null }) {
  return <section class="chat">{conversationId}</section>;
}
