export function MemoryView() {
  return <section class="page">Memory</section>;
}
